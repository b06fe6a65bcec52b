// The x402 v1 wire objects (docs/API.md "x402 payments") as zod schemas, shared by the gateway (the
// facilitator's client) and the facilitator. Parsing is strict about the fields a settlement
// depends on and lenient about optional extras, like the reference implementation.
import { isAddress } from 'ethers';
import { z } from 'zod';

const MAX_UINT256 = (1n << 256n) - 1n;

/** A non-negative decimal integer string that fits in uint256. */
export const Uint256String = z
  .string()
  .regex(/^[0-9]{1,78}$/)
  // zod runs the refinement even when the regex failed: BigInt must only see digits.
  .refine((value) => /^[0-9]{1,78}$/.test(value) && BigInt(value) <= MAX_UINT256, 'out of uint256 range');

export const HexAddress = z.string().regex(/^0x[0-9a-fA-F]{40}$/);

/** TOKEN_ADDRESS as an operator writes it: all one case, or mixed case with its EIP-55 checksum right. */
export const TokenAddressSetting = z
  .string()
  .regex(/^0x[0-9a-fA-F]{40}$/, 'must be a token contract address (0x and 40 hex digits)')
  .refine(
    (value) => !/^0x[0-9a-fA-F]{40}$/.test(value) || isAddress(value),
    'has a wrong EIP-55 checksum (a mistyped letter?): copy the address again, or write it all in lowercase',
  );
export const Bytes32Hex = z.string().regex(/^0x[0-9a-fA-F]{64}$/);
/** A 65-byte ECDSA signature (r, s, v) or a longer contract-wallet signature. */
export const SignatureHex = z.string().regex(/^0x(?:[0-9a-fA-F]{2}){65,}$/);

export const PaymentRequirements = z.object({
  scheme: z.string(),
  network: z.string(),
  maxAmountRequired: Uint256String,
  asset: HexAddress,
  payTo: HexAddress,
  resource: z.string(),
  description: z.string().optional(),
  mimeType: z.string().optional(),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  maxTimeoutSeconds: z.number().int().nonnegative(),
  extra: z.record(z.string(), z.unknown()).optional(),
});
export type PaymentRequirements = z.infer<typeof PaymentRequirements>;

/**
 * The decoded content of an `X-PAYMENT` header, any scheme: the envelope. Its `payload` is the
 * scheme's own (an EIP-3009 authorization for `exact`); the scheme parses it
 * (x402/schemes/index.ts).
 */
export const Payment = z.object({
  x402Version: z.number().int(),
  scheme: z.string(),
  network: z.string(),
  payload: z.record(z.string(), z.unknown()),
});
export type Payment = z.infer<typeof Payment>;

/**
 * A payment as the gate took it: the envelope, and the v2 extensions of the payment that its
 * scheme declared and the payer sent back (an `upto` payer's EIP-2612 permit); a v1 header has none.
 */
export type OfferedPayment = Payment & { extensions?: Record<string, unknown> };

export const SettleRequest = z.object({
  x402Version: z.number().int(),
  paymentPayload: Payment,
  paymentRequirements: PaymentRequirements,
});
export type SettleRequest = z.infer<typeof SettleRequest>;

export const SettleResponse = z.object({
  success: z.boolean(),
  errorReason: z.string().optional(),
  transaction: z.string().optional(),
  network: z.string().optional(),
  payer: z.string().optional(),
  facilitatorFee: z.string().optional(),
});
export type SettleResponse = z.infer<typeof SettleResponse>;

/** One `accepts` entry of a 402 challenge, as unmodified x402 v1 clients parse it. */
export type ChallengeEntry = PaymentRequirements & {
  description: string;
  mimeType: string;
  extra: { name: string; version: string };
};

export type Challenge = { x402Version: 1; error: string; accepts: ChallengeEntry[] };

export const X402_VERSION = 1;

/** base64(JSON), the encoding of `X-PAYMENT` and `X-PAYMENT-RESPONSE`. */
export function encodeBase64Json(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
}

/** Decodes an `X-PAYMENT` header; null when it is not base64 JSON of a Payment envelope. */
export function decodePaymentHeader(header: string): Payment | null {
  if (header.length > 8192 || !/^[A-Za-z0-9+/=_-]+$/.test(header.trim())) return null;
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(header.trim(), 'base64').toString('utf8'));
  } catch {
    return null;
  }
  const parsed = Payment.safeParse(json);
  return parsed.success ? parsed.data : null;
}
