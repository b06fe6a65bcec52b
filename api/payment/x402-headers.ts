// The x402 dialects' HTTP spelling (what each carries and how a payment is taken from it:
// gateway/payment/dialect.ts): v1 pays in X-PAYMENT and is answered in X-PAYMENT-RESPONSE; v2
// pays in PAYMENT-SIGNATURE, is challenged in PAYMENT-REQUIRED (every payment 402 carries it; the
// v1 body is unchanged beside it) and answered in PAYMENT-RESPONSE, as is a payment made in the
// JSON-RPC body (`mcp`).
import { encodeBase64Json, type ChallengeEntry } from '../../x402/schemas.ts';
import { paymentRequiredV2, type Dialect, type PaymentHeaders } from '../../gateway/payment/dialect.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';

const PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED';
/** The header a settled call's receipt is answered in, by the dialect it was paid in. */
export const PAYMENT_RESPONSE_HEADER: Record<Dialect, string> = {
  v1: 'X-PAYMENT-RESPONSE',
  v2: 'PAYMENT-RESPONSE',
  mcp: 'PAYMENT-RESPONSE',
};

/** The payment headers a request carries ('' counts as absent). */
export function paymentHeadersOf(get: (name: string) => string): PaymentHeaders {
  return { xPayment: get('x-payment') || undefined, paymentSignature: get('payment-signature') || undefined };
}

/** The PAYMENT-REQUIRED header of a 402 for a call challenged with `entries`, `error` saying why. */
export function paymentRequiredHeader(
  config: PaymentConfig,
  entries: ChallengeEntry[],
  error: string,
  extensions: Record<string, unknown> = {},
): Record<string, string> {
  return { [PAYMENT_REQUIRED_HEADER]: encodeBase64Json(paymentRequiredV2(config, entries, error, extensions)) };
}
