// The two x402 dialects a caller may pay in (the door spells their headers, api/payment/x402-headers.ts):
// - v1: X-PAYMENT in, X-PAYMENT-RESPONSE out, the challenge in the 402's body;
// - v2: PAYMENT-SIGNATURE in, PAYMENT-RESPONSE out, the challenge in the 402's PAYMENT-REQUIRED
//   header (every payment 402 carries it; the v1 body is unchanged beside it).
// Both carry the same scheme payload. A v2 payment is reduced here to the v1 Payment the gate
// verifies, claims and settles, so one authorization is one payment whatever its envelope: the
// claim key names the v1 network, and the facilitator only ever sees v1.
// - mcp: a v2 PaymentPayload in the JSON-RPC body: the x402 MCP transport's
//   `params._meta["x402/payment"]` (gateway/mcp/x402.ts takes it out; the receipt goes in the
//   result's `_meta["x402/payment-response"]`, gateway/mcp/x402.ts) or the x402 A2A
//   transport's `x402.payment.payload` in message metadata (api/proxy/a2a-x402.ts; the receipt in
//   the answer's `x402.payment.receipts`, gateway/a2a/x402.ts), and PAYMENT-RESPONSE.
// v2 challenges declare the payment-identifier extension, and the extensions of the schemes they
// offer; a v2 or MCP payment may carry an identifier (identifier.ts). Each payload is parsed by the
// scheme of the challenge entry it pays (schemes/), which also keeps the extensions it declared
// that the payer sent back (an `upto` payer's EIP-2612 permit).
import { isDeepStrictEqual } from 'node:util';
import {
  declarePaymentIdentifierExtension,
  isPaymentIdentifierExtension,
  isValidPaymentId,
  PAYMENT_IDENTIFIER,
} from '@x402/extensions/payment-identifier';
import {
  decodePaymentHeader,
  encodeBase64Json,
  type ChallengeEntry,
  type OfferedPayment,
  type Payment,
} from '../../x402/schemas.ts';
import {
  PaymentPayloadV2,
  caip2Network,
  decodeBase64JsonHeader,
  type PaymentRequiredV2,
  type PaymentRequirementsV2,
  type SettleResponseV2,
} from '../../x402/v2.ts';
import type { PaymentConfig } from './config.ts';
import { gatewayScheme } from './schemes/index.ts';
import type { GatewayScheme } from './schemes/scheme.ts';

export type Dialect = 'v1' | 'v2' | 'mcp';

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

/**
 * An offered payment as the gate takes it: the v1 Payment (its payload parsed by its scheme), the
 * challenge entry it pays and the scheme that verifies it, and the payer's payment identifier if any.
 */
export type DecodedOffer = {
  payment: OfferedPayment;
  requirements: ChallengeEntry;
  scheme: GatewayScheme;
  paymentId: string | null;
};

/**
 * The v1 Payment an offered payment carries, or null when it is not one the gate could accept:
 * not (base64) JSON of the dialect's schema, a payload that is not the scheme's, (v2, mcp) an
 * `accepted` entry other than one of this call's `entries` (scheme, network, amount, asset,
 * payTo), or a payment-identifier extension whose id breaks the extension's schema. The payment
 * itself is verified afterwards by the same rules in every dialect.
 */
export function decodeOffer(config: PaymentConfig, offer: Offer, entries: ChallengeEntry[]): DecodedOffer | null {
  if (offer.dialect === 'v1') {
    const envelope = decodePaymentHeader(offer.header);
    if (!envelope) return null;
    // The entry of the scheme it names; else the first, whose verification then names the mismatch.
    const requirements = entries.find((entry) => entry.scheme === envelope.scheme) ?? entries[0];
    return requirements ? withSchemePayload(envelope, requirements, null) : null;
  }
  const raw = offer.dialect === 'v2' ? decodeBase64JsonHeader(offer.header, MAX_V2_HEADER) : offer.payload;
  const parsed = PaymentPayloadV2.safeParse(raw);
  if (!parsed.success) return null;
  const { accepted } = parsed.data;
  const requirements = entries.find((entry) => sameTerms(accepted, requirementsV2(config, entry)));
  if (!requirements) return null;
  const paymentId = paymentIdentifierOf(parsed.data);
  if (paymentId === undefined) return null;
  const envelope: Payment = {
    x402Version: 1,
    scheme: accepted.scheme,
    network: config.network,
    payload: parsed.data.payload,
  };
  return withSchemePayload(envelope, requirements, paymentId, parsed.data.extensions);
}

/**
 * The offer with its payload parsed by the scheme of the entry it pays, and the extensions sent
 * that the scheme declared (`sent`: a v2 payment's); null when it is not that scheme's.
 */
function withSchemePayload(
  envelope: Payment,
  requirements: ChallengeEntry,
  paymentId: string | null,
  sent?: Record<string, unknown> | null,
): DecodedOffer | null {
  const scheme = gatewayScheme(requirements.scheme);
  const payload = scheme?.protocol.parsePayload(envelope.payload);
  if (!scheme || !payload) return null;
  // The x402 client echoes every declared extension into its payment, merged with what it adds:
  // one sent back exactly as declared carries nothing of the payer's (an upto payer that approved
  // Permit2 signs no permit), and is dropped.
  const kept = Object.entries(scheme.extensions)
    .filter(([name, declared]) => sent && Object.hasOwn(sent, name) && !isDeepStrictEqual(sent[name], declared))
    .map(([name]) => name);
  const extensions = kept.length > 0 && sent ? Object.fromEntries(kept.map((name) => [name, sent[name]])) : null;
  return { payment: { ...envelope, payload, ...(extensions ? { extensions } : {}) }, requirements, scheme, paymentId };
}

/**
 * The payment-identifier extension's id (null when none was sent), undefined when it is malformed:
 * an `info` object with a boolean `required` and, when present, an id of 16 to 128 characters of
 * `A-Z a-z 0-9 _ -`, the extension's own rules. The `schema` the payer echoes is not compiled
 * (the extension library compiles it with a new Ajv on every call: ~20 ms of CPU a paid call, and
 * a schema any caller chooses).
 */
function paymentIdentifierOf(payload: PaymentPayloadV2): string | null | undefined {
  if (!payload.extensions || !Object.hasOwn(payload.extensions, PAYMENT_IDENTIFIER)) return null;
  const extension: unknown = payload.extensions[PAYMENT_IDENTIFIER];
  if (!isPaymentIdentifierExtension(extension)) return undefined;
  const { id } = extension.info as { id?: unknown };
  if (id === undefined) return null;
  return typeof id === 'string' && isValidPaymentId(id) ? id : undefined;
}

// Addresses by their bytes (both sides are hex addresses, PaymentRequirementsV2's HexAddress): a
// checksum comparison would cost two keccaks per entry on every paid call.
function sameTerms(accepted: PaymentRequirementsV2, expected: PaymentRequirementsV2): boolean {
  return (
    accepted.scheme === expected.scheme &&
    accepted.network === expected.network &&
    accepted.amount === expected.amount &&
    accepted.asset.toLowerCase() === expected.asset.toLowerCase() &&
    accepted.payTo.toLowerCase() === expected.payTo.toLowerCase()
  );
}

/** The v2 `accepts` entry of a (v1) challenge entry: same terms, CAIP-2 network. */
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
 * The v2 PaymentRequired of a call whose challenge lists `entries` (one per scheme, all of one
 * resource), `error` saying why. It declares the payment-identifier extension, not required: a
 * payer that sends an id gets the first outcome back on a retry; the extensions the entries'
 * schemes declare (`upto`'s eip2612GasSponsoring); `extensions` adds others (a public agent's
 * `bazaar`, api/discovery/bazaar.ts).
 */
export function paymentRequiredV2(
  config: PaymentConfig,
  entries: ChallengeEntry[],
  error: string,
  extensions: Record<string, unknown> = {},
): PaymentRequiredV2 {
  const [{ resource, description, mimeType }] = entries;
  const declared = entries.map((entry) => gatewayScheme(entry.scheme)?.extensions ?? {});
  return {
    x402Version: 2,
    error,
    resource: { url: resource, description, mimeType },
    accepts: entries.map((entry) => requirementsV2(config, entry)),
    extensions: {
      ...extensions,
      ...Object.assign({}, ...declared),
      [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false),
    },
  };
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
