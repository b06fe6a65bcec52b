// A /settle request for the x402 `batch-settlement` scheme, as the x402 v2 facilitator interface
// carries it: `paymentPayload.payload` is one of the four settle actions of the EVM binding, the
// `type` saying which. `deposit`: the client's deposit payload (the ERC-3009 collector path).
// `claim`: the server's batch of cumulative voucher claims, one row per channel, all in one
// claimWithSignature. `settle`: sweep what was claimed for (receiver, token) to the receiver.
// `refund`: the client's refund payload (a zero-charge voucher, an optional amount) as the server
// completes it (the refund nonce, the claims before it). The receiver-authorizer signatures a
// server owning that key would add are read and dropped: this facilitator is the receiver
// authorizer of the channels it settles, and signs itself. Facts from the x402 batch-settlement
// EVM spec and @x402/evm's types.
import { z } from 'zod';
import { HexAddress, SignatureHex, Uint256String } from '../../schemas.ts';
import {
  BatchSettlementPayload,
  ChannelConfig,
  DepositPayload,
  RefundPayload,
  SCHEME_BATCH_SETTLEMENT,
} from './schemas.ts';

/**
 * The most rows one claim transaction carries: gas grows with each (about 30 000 a row on the
 * stack's anvil, so 100 rows stay far below a block), and so does the body (about 650 bytes a
 * row: the facilitator's /settle body cap leaves room for 100).
 */
export const MAX_CLAIM_ROWS = 100;

const ClaimRow = z.object({
  voucher: z.object({ channel: ChannelConfig, maxClaimableAmount: Uint256String }),
  /** The payer's (or its authorizer's) voucher signature. */
  signature: SignatureHex,
  /** The channel's claimed total after the claim; at most the voucher's ceiling. */
  totalClaimed: Uint256String,
});
export type ClaimRow = z.infer<typeof ClaimRow>;

const ClaimAction = z.object({
  type: z.literal('claim'),
  claims: z.array(ClaimRow).min(1).max(MAX_CLAIM_ROWS),
});

const SettleAction = z.object({ type: z.literal('settle'), receiver: HexAddress, token: HexAddress });

const RefundAction = RefundPayload.extend({
  /** The channel's refund nonce the refund is signed at (the server's mirror); read from the chain when absent. */
  refundNonce: Uint256String.optional(),
});

const BatchSettleAction = z.discriminatedUnion('type', [DepositPayload, ClaimAction, SettleAction, RefundAction]);
type BatchSettleAction = z.infer<typeof BatchSettleAction>;

const Requirements = z.looseObject({
  scheme: z.literal(SCHEME_BATCH_SETTLEMENT),
  network: z.string().min(1),
  asset: HexAddress,
  amount: Uint256String,
  payTo: HexAddress,
  extra: z
    .looseObject({
      receiverAuthorizer: HexAddress.optional(),
      withdrawDelay: z.number().int().nonnegative().optional(),
    })
    .nullish(),
});

const SettleBody = z.object({
  x402Version: z.literal(2),
  paymentPayload: z.looseObject({ x402Version: z.literal(2), payload: BatchSettleAction }),
  paymentRequirements: Requirements,
});

/**
 * What the facilitator settles for a batch-settlement request: the requirements' terms and the
 * action. What the handler resolved before naming the settlement travels with it (`resolved`),
 * so every step signs the same transaction: a refund's nonce and amount, the receiver's claimed
 * total a settle sweeps up to.
 */
export type BatchSettleRequest = {
  scheme: typeof SCHEME_BATCH_SETTLEMENT;
  /** The requirements' network, as sent (CAIP-2). */
  network: string;
  asset: string;
  payTo: string;
  /** The requirements' amount: a deposit's price of the call it pays for. */
  amount: string;
  receiverAuthorizer?: string;
  withdrawDelay?: number;
  action: BatchSettleAction;
  resolved?: { refundNonce?: string; refundAmount?: string; settledUpTo?: string };
};

/** The requirements' terms as a request carries them. */
function termsOf(r: z.infer<typeof Requirements>): Omit<BatchSettleRequest, 'action' | 'resolved'> {
  return {
    scheme: SCHEME_BATCH_SETTLEMENT,
    network: r.network,
    asset: r.asset,
    payTo: r.payTo,
    amount: r.amount,
    ...(r.extra?.receiverAuthorizer ? { receiverAuthorizer: r.extra.receiverAuthorizer } : {}),
    ...(r.extra?.withdrawDelay === undefined ? {} : { withdrawDelay: r.extra.withdrawDelay }),
  };
}

/** The request in its one form; null when the body is no x402 v2 batch-settlement settle request. */
export function parseBatchSettleRequest(body: unknown): BatchSettleRequest | null {
  const parsed = SettleBody.safeParse(body);
  if (!parsed.success) return null;
  return { ...termsOf(parsed.data.paymentRequirements), action: parsed.data.paymentPayload.payload };
}

const VerifyBody = z.object({
  x402Version: z.literal(2),
  paymentPayload: z.looseObject({ x402Version: z.literal(2), payload: BatchSettlementPayload }),
  paymentRequirements: Requirements,
});

/** A /verify request: the client's payment (a deposit, voucher or refund) against the requirements. */
export type BatchVerifyRequest = Omit<BatchSettleRequest, 'action' | 'resolved'> & { payment: BatchSettlementPayload };

/** The /verify request in its one form; null when the body is no x402 v2 batch-settlement verify request. */
export function parseBatchVerifyRequest(body: unknown): BatchVerifyRequest | null {
  const parsed = VerifyBody.safeParse(body);
  if (!parsed.success) return null;
  return { ...termsOf(parsed.data.paymentRequirements), payment: parsed.data.paymentPayload.payload };
}
