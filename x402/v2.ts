// The x402 v2 wire objects the gateway speaks to its callers, as zod schemas mirroring
// @x402/core's (src/schemas, types): PaymentRequired (the PAYMENT-REQUIRED header),
// PaymentPayload (PAYMENT-SIGNATURE) and SettleResponse (PAYMENT-RESPONSE). @x402/* are dev
// dependencies only, so the gateway validates with these. The payload inside is the scheme's
// own, the same as in v1 (x402/schemes/): v2 changed the envelope, not what is signed.
import { z } from 'zod';
import { HexAddress, Uint256String } from './schemas.ts';

const NonEmptyString = z.string().min(1);
/** CAIP-2, as @x402/core checks it: at least 3 characters with a colon (`eip155:8453`). */
const NetworkV2 = z
  .string()
  .min(3)
  .refine((value) => value.includes(':'), 'network must be CAIP-2');
const OptionalRecord = z.record(z.string(), z.unknown()).nullish();

const ResourceInfo = z.object({
  url: NonEmptyString,
  description: z.string().nullish(),
  mimeType: z.string().nullish(),
});
type ResourceInfo = z.infer<typeof ResourceInfo>;

export const PaymentRequirementsV2 = z.object({
  scheme: NonEmptyString,
  network: NetworkV2,
  amount: Uint256String,
  asset: HexAddress,
  payTo: HexAddress,
  maxTimeoutSeconds: z.number().positive(),
  extra: OptionalRecord,
});
export type PaymentRequirementsV2 = z.infer<typeof PaymentRequirementsV2>;

/** The 402's PAYMENT-REQUIRED header, as the gateway writes it. */
export type PaymentRequiredV2 = {
  x402Version: 2;
  error?: string;
  resource: { url: string; description: string; mimeType: string };
  accepts: Array<PaymentRequirementsV2 & { extra: { name: string; version: string } }>;
  /** Extensions the server declares (x402 v2): the gateway declares `payment-identifier`. */
  extensions?: Record<string, unknown>;
};

/** The decoded PAYMENT-SIGNATURE header: `accepted` names the requirements the payer chose. */
export const PaymentPayloadV2 = z.object({
  x402Version: z.literal(2),
  resource: ResourceInfo.nullish(),
  accepted: PaymentRequirementsV2,
  /** The scheme's payload: parsed by the scheme `accepted` names (x402/schemes/). */
  payload: z.record(z.string(), z.unknown()),
  extensions: OptionalRecord,
});
export type PaymentPayloadV2 = z.infer<typeof PaymentPayloadV2>;

/**
 * The PAYMENT-RESPONSE header of a settled call. A scheme may add what its payer keeps between
 * calls: `batch-settlement`'s deposited `amount` and its `extra` (the call's charge, the channel's state).
 */
export type SettleResponseV2 = {
  success: true;
  transaction: string;
  network: string;
  payer: string;
  amount?: string;
  extra?: Record<string, unknown>;
};

/** The EVM network of a chain id in CAIP-2 (`eip155:8453` for Base). */
export function caip2Network(chainId: number): string {
  return `eip155:${chainId}`;
}

/** base64(JSON) of a header; null when it is not base64 of JSON. Bounded, so a huge header costs nothing to refuse. */
export function decodeBase64JsonHeader(header: string, maxLength: number): unknown {
  const trimmed = header.trim();
  if (trimmed.length === 0 || trimmed.length > maxLength || !/^[A-Za-z0-9+/=_-]+$/.test(trimmed)) return null;
  try {
    return JSON.parse(Buffer.from(trimmed, 'base64').toString('utf8')) as unknown;
  } catch {
    return null;
  }
}
