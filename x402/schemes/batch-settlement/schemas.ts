// The x402 `batch-settlement` payment on the wire (x402 v2, EVM), as @x402/evm's
// `batch-settlement` client builds it. Every payload names the channel's immutable config and
// carries a cumulative voucher the payer's authorizer signed; `payload.type` says what it is:
// `deposit` (first call or top-up: the voucher plus the payer's ERC-3009 receiveWithAuthorization
// for the ERC-3009 collector, or a Permit2 witness transfer for the Permit2 collector), `voucher`
// (a call paid from the escrow) or `refund` (the zero-charge voucher asking for unclaimed escrow
// back; `amount` absent means all of it). Amounts are decimal strings; withdrawDelay is a number.
import { z } from 'zod';
import { Bytes32Hex, HexAddress, SignatureHex, Uint256String } from '../../schemas.ts';

export const SCHEME_BATCH_SETTLEMENT = 'batch-settlement';

/** The channel's immutable parameters; their EIP-712 hash is the channel id. */
export const ChannelConfig = z.object({
  payer: HexAddress,
  payerAuthorizer: HexAddress,
  receiver: HexAddress,
  receiverAuthorizer: HexAddress,
  token: HexAddress,
  /** Seconds; a uint40. */
  withdrawDelay: z
    .number()
    .int()
    .nonnegative()
    .max(2 ** 40 - 1),
  salt: Bytes32Hex,
});
export type ChannelConfig = z.infer<typeof ChannelConfig>;

const Voucher = z.object({
  channelId: Bytes32Hex,
  /** The cumulative ceiling the receiver side may claim from the channel. */
  maxClaimableAmount: Uint256String,
  signature: SignatureHex,
});

/** The receiveWithAuthorization's window, the salt its nonce is derived from, and its signature. */
const Erc3009DepositAuthorization = z.object({
  validAfter: Uint256String,
  validBefore: Uint256String,
  salt: Bytes32Hex,
  signature: SignatureHex,
});

const Permit2DepositAuthorization = z.object({
  from: HexAddress,
  permitted: z.object({ token: HexAddress, amount: Uint256String }),
  spender: HexAddress,
  nonce: Uint256String,
  deadline: Uint256String,
  witness: z.object({ channelId: Bytes32Hex }),
  signature: SignatureHex,
});

export const DepositPayload = z.object({
  type: z.literal('deposit'),
  channelConfig: ChannelConfig,
  voucher: Voucher,
  deposit: z.object({
    amount: Uint256String,
    authorization: z.union([
      z.object({ erc3009Authorization: Erc3009DepositAuthorization }),
      z.object({ permit2Authorization: Permit2DepositAuthorization }),
    ]),
  }),
});
export type DepositPayload = z.infer<typeof DepositPayload>;

const VoucherPayload = z.object({ type: z.literal('voucher'), channelConfig: ChannelConfig, voucher: Voucher });

export const RefundPayload = z.object({
  type: z.literal('refund'),
  channelConfig: ChannelConfig,
  voucher: Voucher,
  amount: Uint256String.optional(),
});

export const BatchSettlementPayload = z.discriminatedUnion('type', [DepositPayload, VoucherPayload, RefundPayload]);
export type BatchSettlementPayload = z.infer<typeof BatchSettlementPayload>;

/**
 * A v2 payment whose `accepted` entry is `batch-settlement`; lenient where @x402/core is (resource,
 * extra and extensions pass through).
 */
export const BatchSettlementPayment = z.object({
  x402Version: z.literal(2),
  accepted: z.looseObject({
    scheme: z.literal(SCHEME_BATCH_SETTLEMENT),
    network: z.string().min(3),
    amount: Uint256String,
    asset: HexAddress,
    payTo: HexAddress,
    maxTimeoutSeconds: z.number().positive(),
  }),
  payload: BatchSettlementPayload,
  extensions: z.looseObject({}).nullish(),
});
export type BatchSettlementPayment = z.infer<typeof BatchSettlementPayment>;
