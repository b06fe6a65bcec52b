// The `batch-settlement` scheme at the gateway (x402 payment channels): the challenge entry of a
// price (the per-call ceiling, the tenant facilitator's receiver authorizer, the channel's
// withdrawal delay and the least deposit) and the checks of a payment that need no state: the
// channel config hashes to the voucher's channel id and names this token, the agent's payee, that
// authorizer and that delay, and the voucher (and a deposit's authorization) is signed by the
// payer. What needs the channel's state (the cumulative ceiling against what was charged, the
// escrow) is the channel admission's (../../channels/), which holds the channel while the call runs.
import { checksummed } from '../../../../x402/address.ts';
import { batchSettlementProtocol } from '../../../../x402/schemes/batch-settlement/index.ts';
import {
  type BatchSettlementPayload,
  SCHEME_BATCH_SETTLEMENT,
} from '../../../../x402/schemes/batch-settlement/schemas.ts';
import { verifyDeposit, verifyVoucher, voucherTerms } from '../../../../x402/schemes/batch-settlement/verify.ts';
import { caip2Network } from '../../../../x402/v2.ts';
import type { PaymentRequirements } from '../../../../x402/schemas.ts';
import type { PaymentConfig } from '../../config.ts';
import type { SupportedKind } from '../../supported.ts';
import { entryTerms } from '../entry.ts';
import { DEFAULT_WITHDRAW_DELAY } from '../../channel-terms.ts';
import type { GatewayScheme } from '../scheme.ts';

/** Unbounded escrow: the stateless checks leave the balance to the admission. */
const ANY_ESCROW = { balance: 1n << 128n, totalClaimed: 0n };

/** The facilitator's batch-settlement kind for this chain: the receiver authorizer that signs claims and refunds. */
export function receiverAuthorizerOf(config: PaymentConfig, kinds: readonly SupportedKind[] | null): string | null {
  const kind = kinds?.find(
    (k) => k.scheme === SCHEME_BATCH_SETTLEMENT && k.network === caip2Network(config.domain.chainId),
  );
  const address = kind?.extra?.receiverAuthorizer;
  try {
    return typeof address === 'string' ? checksummed(address) : null;
  } catch {
    return null;
  }
}

/** What an entry names of a channel: its receiver authorizer and withdrawal delay. */
export function channelTermsOf(
  requirements: PaymentRequirements,
): { receiverAuthorizer: string; withdrawDelay: number } | null {
  const { receiverAuthorizer, withdrawDelay } = requirements.extra ?? {};
  if (typeof receiverAuthorizer !== 'string' || typeof withdrawDelay !== 'number') return null;
  return { receiverAuthorizer, withdrawDelay };
}

/**
 * A channel whose vouchers the payer's own address signs (`payerAuthorizer` zero) is not served:
 * the contract then checks them with SignatureChecker, which asks the address's ERC-1271 answer
 * once it has code, and an address can gain code after its calls were served (EIP-7702) or a
 * wallet change its answer, leaving vouchers the seller cannot claim while the payer withdraws.
 * A payer authorizer's ECDSA signature cannot be taken back. The reference client names its
 * signer; a refund (which only returns what was not charged) is still taken.
 */
function unclaimableSigner(payload: BatchSettlementPayload): boolean {
  return payload.type !== 'refund' && BigInt(payload.channelConfig.payerAuthorizer) === 0n;
}
const PAYER_AUTHORIZER_REQUIRED = 'payer_authorizer_required';

/** The name of a channel payment's binding: its channel and cumulative ceiling (a refund's has its own prefix). */
function channelPaymentNonce(payload: BatchSettlementPayload): string {
  const kind = payload.type === 'refund' ? 'refund' : 'voucher';
  return `batch-${kind}-${payload.voucher.channelId.toLowerCase()}-${BigInt(payload.voucher.maxClaimableAmount)}`;
}

export const batchSettlementGatewayScheme: GatewayScheme = {
  protocol: batchSettlementProtocol,
  readsFacilitator: true,
  settlesAfterCall: true,
  // Its vouchers have no validity window, and their signer is recovered, never asked (no ERC-1271).
  verdictLasts: true,
  extensions: {},

  challengeEntry(config, price, resource, facilitator) {
    const receiverAuthorizer = receiverAuthorizerOf(config, facilitator);
    if (!receiverAuthorizer) return null;
    return {
      ...entryTerms(config, SCHEME_BATCH_SETTLEMENT, price, resource),
      extra: {
        name: config.domain.name,
        version: config.domain.version,
        receiverAuthorizer,
        withdrawDelay: price.withdrawDelay ?? DEFAULT_WITHDRAW_DELAY,
        ...(price.minDeposit === undefined ? {} : { minDeposit: price.minDeposit }),
      },
    };
  },

  async verify(config, payment, requirements) {
    const payload = batchSettlementProtocol.parse(payment.payload);
    const terms = channelTermsOf(requirements);
    if (!payload || !terms || requirements.scheme !== SCHEME_BATCH_SETTLEMENT)
      return { ok: false, cause: 'invalid_payload' };
    if (unclaimableSigner(payload)) return { ok: false, cause: PAYER_AUTHORIZER_REQUIRED };
    const expectation = {
      chainId: config.domain.chainId,
      asset: requirements.asset,
      payTo: requirements.payTo,
      receiverAuthorizer: terms.receiverAuthorizer,
      withdrawDelay: terms.withdrawDelay,
      ceiling: payload.type === 'refund' ? 0n : BigInt(requirements.maxAmountRequired),
    };
    const checked =
      payload.type === 'deposit'
        ? await verifyDeposit(
            payload,
            {
              ...expectation,
              token: config.domain,
              now: Math.floor(Date.now() / 1000),
              marginSeconds: config.validityMarginSeconds,
              ...(typeof requirements.extra?.minDeposit === 'string'
                ? { minDeposit: BigInt(requirements.extra.minDeposit) }
                : {}),
            },
            ANY_ESCROW,
          )
        : await verifyVoucher(payload, expectation, ANY_ESCROW);
    if (!checked.ok) return { ok: false, cause: checked.cause };
    return { ok: true, payer: checked.payer, nonce: channelPaymentNonce(payload) };
  },

  // A plain voucher's signature is checked when the flow asks (`signed`); any other payload whole.
  async verifyTerms(config, payment, requirements) {
    const payload = batchSettlementProtocol.parse(payment.payload);
    const terms = channelTermsOf(requirements);
    if (payload?.type !== 'voucher' || !terms || requirements.scheme !== SCHEME_BATCH_SETTLEMENT)
      return this.verify(config, payment, requirements);
    if (unclaimableSigner(payload)) return { ok: false, cause: PAYER_AUTHORIZER_REQUIRED };
    const checked = voucherTerms(payload, {
      chainId: config.domain.chainId,
      asset: requirements.asset,
      payTo: requirements.payTo,
      receiverAuthorizer: terms.receiverAuthorizer,
      withdrawDelay: terms.withdrawDelay,
      ceiling: BigInt(requirements.maxAmountRequired),
    });
    if (!checked.ok) return { ok: false, cause: checked.cause };
    // Recovered once, however many stages ask (the admission before a lease, the stream as it writes).
    let signed: Promise<boolean> | undefined;
    return {
      ok: true,
      payer: checked.payer,
      nonce: channelPaymentNonce(payload),
      signed: () => (signed ??= checked.signer().then((signer) => signer !== null)),
    };
  },

  // A voucher has no validity window: it stays good until claimed.
  momentInside: () => null,
};
