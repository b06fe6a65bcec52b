// The two x402 dialects a caller may pay in, negotiated by header:
// - v1: X-PAYMENT in, X-PAYMENT-RESPONSE out, the challenge in the 402's body;
// - v2: PAYMENT-SIGNATURE in, PAYMENT-RESPONSE out, the challenge in the 402's PAYMENT-REQUIRED
//   header (every payment 402 carries it; the v1 body is unchanged beside it).
// Both carry the same EIP-3009 authorization. A v2 payment is reduced here to the v1 Payment
// the gate verifies, claims and settles, so one authorization is one payment whatever its
// envelope: the claim key names the v1 network, and the facilitator only ever sees v1.
// - mcp: a v2 PaymentPayload in the JSON-RPC body: the x402 MCP transport's
//   `params._meta["x402/payment"]` (gateway/mcp/x402.ts takes it out; the receipt goes in the
//   result's `_meta["x402/payment-response"]`, gateway/mcp/x402.ts) or the x402 A2A
//   transport's `x402.payment.payload` in message metadata (api/proxy/a2a-x402.ts; the receipt in
//   the answer's `x402.payment.receipts`, gateway/a2a/x402.ts), and PAYMENT-RESPONSE.
// v2 challenges declare the payment-identifier extension; a v2 or MCP payment may carry an
// identifier (api/payment/identifier.ts).
import { getAddress } from 'ethers';
import {
  declarePaymentIdentifierExtension,
  extractAndValidatePaymentIdentifier,
  PAYMENT_IDENTIFIER,
} from '@x402/extensions/payment-identifier';
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

export type Dialect = 'v1' | 'v2' | 'mcp';

const PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED';
/** The header a settled call's receipt is answered in, by the dialect it was paid in. */
export const PAYMENT_RESPONSE_HEADER: Record<Dialect, string> = {
  v1: 'X-PAYMENT-RESPONSE',
  v2: 'PAYMENT-RESPONSE',
  mcp: 'PAYMENT-RESPONSE',
};

/**
 * The payments a request carries, as sent ('' counts as absent): its headers and, for an MCP
 * request, the `_meta` payment (`mcp` set, whatever its value, when the key was present).
 */
export type PaymentHeaders = { xPayment?: string; paymentSignature?: string; mcp?: { payload: unknown } };

/**
 * A payment carried in the JSON-RPC body, as an offer beside the headers: an MCP call's `_meta`
 * payment (gateway/mcp/x402.ts) or an A2A message's `x402.payment.payload` sent with the x402 A2A
 * extension (api/proxy/a2a-x402.ts). Both are a v2 PaymentPayload and take the `mcp` path.
 */
export function bodyPaymentOf(call: {
  mcp: { payment?: unknown; forwardBody?: Buffer } | null;
  a2a?: { x402?: { paid: boolean; payload: unknown } | null } | null;
}): PaymentHeaders {
  if (call.mcp?.forwardBody) return { mcp: { payload: call.mcp.payment } };
  if (call.a2a?.x402?.paid) return { mcp: { payload: call.a2a.x402.payload } };
  return {};
}

type Offer =
  { dialect: 'v1'; header: string } | { dialect: 'v2'; header: string } | { dialect: 'mcp'; payload: unknown };

export function paymentHeadersOf(get: (name: string) => string): PaymentHeaders {
  return { xPayment: get('x-payment') || undefined, paymentSignature: get('payment-signature') || undefined };
}

/**
 * Which payment the caller offers: none, one header in one dialect, or `both`, which is
 * refused (402 invalid payment): two envelopes may carry two authorizations, and the gate
 * will not guess which one the payer meant to spend.
 */
export function offeredPayment(headers: PaymentHeaders): Offer | 'none' | 'both' {
  const offers: Offer[] = [];
  if (headers.xPayment) offers.push({ dialect: 'v1', header: headers.xPayment });
  if (headers.paymentSignature) offers.push({ dialect: 'v2', header: headers.paymentSignature });
  if (headers.mcp) offers.push({ dialect: 'mcp', payload: headers.mcp.payload });
  if (offers.length > 1) return 'both';
  return offers[0] ?? 'none';
}

// A v2 payload repeats the requirements and the resource: larger than a v1 one, still bounded
// (Node refuses request heads over 16 KiB anyway).
const MAX_V2_HEADER = 16_384;

/** An offered payment as the gate takes it: the v1 Payment, and the payer's payment identifier if any. */
export type DecodedOffer = { payment: Payment; paymentId: string | null };

/**
 * The v1 Payment an offered payment carries, or null when it is not one the gate could accept:
 * not (base64) JSON of the dialect's schema, (v2, mcp) an `accepted` entry other than this call's
 * requirements (scheme, network, amount, asset, payTo), or a payment-identifier extension whose
 * id breaks the extension's schema. The authorization itself is verified afterwards by the same
 * rules in every dialect.
 */
export function decodeOffer(config: PaymentConfig, offer: Offer, requirements: ChallengeEntry): DecodedOffer | null {
  if (offer.dialect === 'v1') {
    const payment = decodePaymentHeader(offer.header);
    return payment && { payment, paymentId: null };
  }
  const raw = offer.dialect === 'v2' ? decodeBase64JsonHeader(offer.header, MAX_V2_HEADER) : offer.payload;
  const parsed = PaymentPayloadV2.safeParse(raw);
  if (!parsed.success || !sameTerms(parsed.data.accepted, requirementsV2(config, requirements))) return null;
  const paymentId = paymentIdentifierOf(parsed.data);
  if (paymentId === undefined) return null;
  const payment: Payment = {
    x402Version: 1,
    scheme: parsed.data.accepted.scheme,
    network: config.network,
    payload: parsed.data.payload,
  };
  return { payment, paymentId };
}

/** The payment-identifier extension's id (null when none was sent), undefined when it is malformed. */
function paymentIdentifierOf(payload: PaymentPayloadV2): string | null | undefined {
  if (!payload.extensions || !Object.hasOwn(payload.extensions, PAYMENT_IDENTIFIER)) return null;
  const { id, validation } = extractAndValidatePaymentIdentifier(
    payload as unknown as Parameters<typeof extractAndValidatePaymentIdentifier>[0],
  );
  return validation.valid ? id : undefined;
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
export function requirementsV2(
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

/**
 * The v2 PaymentRequired of this call, `error` saying why. It declares the payment-identifier
 * extension, not required: a payer that sends an id gets the first outcome back on a retry;
 * `extensions` adds others (a public agent's `bazaar`, api/discovery/bazaar.ts).
 */
export function paymentRequiredV2(
  config: PaymentConfig,
  entry: ChallengeEntry,
  error: string,
  extensions: Record<string, unknown> = {},
): PaymentRequiredV2 {
  return {
    x402Version: 2,
    error,
    resource: { url: entry.resource, description: entry.description, mimeType: entry.mimeType },
    accepts: [requirementsV2(config, entry)],
    extensions: { ...extensions, [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) },
  };
}

/** The PAYMENT-REQUIRED header of a 402 for this call, `error` saying why. */
export function paymentRequiredHeader(
  config: PaymentConfig,
  entry: ChallengeEntry,
  error: string,
  extensions: Record<string, unknown> = {},
): Record<string, string> {
  return { [PAYMENT_REQUIRED_HEADER]: encodeBase64Json(paymentRequiredV2(config, entry, error, extensions)) };
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
  return encodeBase64Json(settleResponseV2(config, settled));
}

/** The v2 SettleResponse of a settled call (PAYMENT-RESPONSE, and the MCP result's `_meta`). */
export function settleResponseV2(
  config: PaymentConfig,
  settled: { transaction: string; payer: string },
): SettleResponseV2 {
  return {
    success: true,
    transaction: settled.transaction,
    network: caip2Network(config.domain.chainId),
    payer: settled.payer,
  };
}
