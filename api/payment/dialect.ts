// The two x402 dialects a caller may pay in, negotiated by header:
// - v1: X-PAYMENT in, X-PAYMENT-RESPONSE out, the challenge in the 402's body;
// - v2: PAYMENT-SIGNATURE in, PAYMENT-RESPONSE out, the challenge in the 402's PAYMENT-REQUIRED
//   header (every payment 402 carries it; the v1 body is unchanged beside it).
// Both carry the same EIP-3009 authorization. A v2 payment is reduced here to the v1 Payment
// the gate verifies, claims and settles, so one authorization is one payment whatever its
// envelope: the claim key names the v1 network, and the facilitator only ever sees v1.
import { getAddress } from 'ethers';
import { decodePaymentHeader, encodeBase64Json, type ChallengeEntry, type Payment } from '../../x402/schemas.ts';
import {
  PaymentPayloadV2,
  caip2Network,
  decodeBase64JsonHeader,
  type PaymentRequiredV2,
  type PaymentRequirementsV2,
  type SettleResponseV2,
} from '../../x402/v2.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';

export type Dialect = 'v1' | 'v2';

const PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED';
/** The header a settled call's receipt is answered in, by the dialect it was paid in. */
export const PAYMENT_RESPONSE_HEADER: Record<Dialect, string> = { v1: 'X-PAYMENT-RESPONSE', v2: 'PAYMENT-RESPONSE' };

/** The payment headers of a request, as sent ('' counts as absent). */
export type PaymentHeaders = { xPayment?: string; paymentSignature?: string };

export function paymentHeadersOf(get: (name: string) => string): PaymentHeaders {
  return { xPayment: get('x-payment') || undefined, paymentSignature: get('payment-signature') || undefined };
}

/**
 * Which payment the caller offers: none, one header in one dialect, or `both`, which is
 * refused (402 invalid payment): two envelopes may carry two authorizations, and the gate
 * will not guess which one the payer meant to spend.
 */
export function offeredPayment(headers: PaymentHeaders): { dialect: Dialect; header: string } | 'none' | 'both' {
  if (headers.xPayment && headers.paymentSignature) return 'both';
  if (headers.xPayment) return { dialect: 'v1', header: headers.xPayment };
  if (headers.paymentSignature) return { dialect: 'v2', header: headers.paymentSignature };
  return 'none';
}

// A v2 payload repeats the requirements and the resource: larger than a v1 one, still bounded
// (Node refuses request heads over 16 KiB anyway).
const MAX_V2_HEADER = 16_384;

/**
 * The v1 Payment an offered header carries, or null when it is not one the gate could accept:
 * not base64 JSON of the dialect's schema, or (v2) an `accepted` entry other than this call's
 * requirements (scheme, network, amount, asset, payTo). The authorization itself is verified
 * afterwards by the same rules in both dialects.
 */
export function decodeOffer(
  config: PaymentConfig,
  offer: { dialect: Dialect; header: string },
  requirements: ChallengeEntry,
): Payment | null {
  if (offer.dialect === 'v1') return decodePaymentHeader(offer.header);
  const parsed = PaymentPayloadV2.safeParse(decodeBase64JsonHeader(offer.header, MAX_V2_HEADER));
  if (!parsed.success || !sameTerms(parsed.data.accepted, requirementsV2(config, requirements))) return null;
  return { x402Version: 1, scheme: parsed.data.accepted.scheme, network: config.network, payload: parsed.data.payload };
}

function sameTerms(accepted: PaymentRequirementsV2, expected: PaymentRequirementsV2): boolean {
  return (
    accepted.scheme === expected.scheme &&
    accepted.network === expected.network &&
    accepted.amount === expected.amount &&
    getAddress(accepted.asset.toLowerCase()) === expected.asset &&
    getAddress(accepted.payTo.toLowerCase()) === expected.payTo
  );
}

/** The v2 `accepts` entry of this call's (v1) requirements: same terms, CAIP-2 network. */
function requirementsV2(
  config: PaymentConfig,
  entry: ChallengeEntry,
): PaymentRequirementsV2 & { extra: { name: string; version: string } } {
  return {
    scheme: entry.scheme,
    network: caip2Network(config.domain.chainId),
    amount: entry.maxAmountRequired,
    asset: entry.asset,
    payTo: entry.payTo,
    maxTimeoutSeconds: entry.maxTimeoutSeconds,
    extra: entry.extra,
  };
}

/** The PAYMENT-REQUIRED header of a 402 for this call, `error` saying why. */
export function paymentRequiredHeader(
  config: PaymentConfig,
  entry: ChallengeEntry,
  error: string,
): Record<string, string> {
  const required: PaymentRequiredV2 = {
    x402Version: 2,
    error,
    resource: { url: entry.resource, description: entry.description, mimeType: entry.mimeType },
    accepts: [requirementsV2(config, entry)],
  };
  return { [PAYMENT_REQUIRED_HEADER]: encodeBase64Json(required) };
}

/**
 * The receipt of a settled call, in the dialect it was paid in. v1 names the network the
 * facilitator answered (as before); v2 the configured chain in CAIP-2.
 */
export function paymentResponseValue(
  config: PaymentConfig,
  dialect: Dialect,
  settled: { transaction: string; network: string; payer: string },
): string {
  if (dialect === 'v1')
    return encodeBase64Json({
      success: true,
      transaction: settled.transaction,
      network: settled.network,
      payer: settled.payer,
    });
  const response: SettleResponseV2 = {
    success: true,
    transaction: settled.transaction,
    network: caip2Network(config.domain.chainId),
    payer: settled.payer,
  };
  return encodeBase64Json(response);
}
