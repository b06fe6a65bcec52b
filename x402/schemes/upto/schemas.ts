// The x402 `upto` payment on the wire (x402 v2, EVM), as @x402/evm's `upto` client builds it:
// `payload` holds the Permit2 authorization and its signature; the payer's EIP-2612 permit for
// Permit2, when it has not approved Permit2 and the server declared `eip2612GasSponsoring`, rides
// in `extensions.eip2612GasSponsoring.info`. Numbers are decimal strings; the Permit2 nonce is a
// random uint256 (the client writes it in decimal; the scheme's spec shows hex, also accepted).
import { z } from 'zod';
import { HexAddress, SignatureHex, Uint256String } from '../../schemas.ts';

export const SCHEME_UPTO = 'upto';

const MAX_UINT256 = (1n << 256n) - 1n;
/** A uint256 in decimal, or in 0x-hex of at most 64 digits. */
const Uint256DecimalOrHex = z.union([Uint256String, z.string().regex(/^0x[0-9a-fA-F]{1,64}$/)]);

export const UptoAuthorization = z.object({
  from: HexAddress,
  permitted: z.object({ token: HexAddress, amount: Uint256String }),
  spender: HexAddress,
  nonce: Uint256DecimalOrHex,
  deadline: Uint256String,
  witness: z.object({ to: HexAddress, facilitator: HexAddress, validAfter: Uint256String }),
});
export type UptoAuthorization = z.infer<typeof UptoAuthorization>;

/** The v2 PaymentPayload's `payload` for `upto`. */
const UptoPayload = z.object({ signature: SignatureHex, permit2Authorization: UptoAuthorization });

export const EIP2612_GAS_SPONSORING = 'eip2612GasSponsoring';

/** What the client puts in `extensions.eip2612GasSponsoring.info` (the extension's spec, version "1"). */
export const Eip2612GasSponsoringInfo = z.object({
  from: HexAddress,
  asset: HexAddress,
  spender: HexAddress,
  amount: Uint256String,
  nonce: Uint256String,
  deadline: Uint256String,
  /** 65 bytes (r, s, v): the proxy submits it to the token's (v, r, s) `permit`. */
  signature: z.string().regex(/^0x[0-9a-fA-F]{130}$/),
  version: z.string().regex(/^[0-9]+(\.[0-9]+)*$/),
});
export type Eip2612GasSponsoringInfo = z.infer<typeof Eip2612GasSponsoringInfo>;

/** The fields a signed permit fills; an info lacking any of them carries no permit. */
const SIGNED_PERMIT_FIELDS = ['from', 'asset', 'spender', 'amount', 'nonce', 'deadline', 'signature', 'version'];

/**
 * The eip2612GasSponsoring permit a payment carries, read as the x402 reference reads it: an
 * `info` missing any signed field is no permit (the client copies the server's declaration into
 * every payment, and a payer that already approved Permit2 signs none); a complete one must be
 * well formed (`invalid` otherwise).
 */
export function sponsoredPermitOf(
  payment: Pick<UptoPayment, 'extensions'>,
): { kind: 'none' } | { kind: 'permit'; info: Eip2612GasSponsoringInfo } | { kind: 'invalid' } {
  const info = payment.extensions?.[EIP2612_GAS_SPONSORING]?.info;
  if (typeof info !== 'object' || info === null) return { kind: 'none' };
  const fields = info as Record<string, unknown>;
  if (SIGNED_PERMIT_FIELDS.some((field) => !fields[field])) return { kind: 'none' };
  const parsed = Eip2612GasSponsoringInfo.safeParse(info);
  return parsed.success ? { kind: 'permit', info: parsed.data } : { kind: 'invalid' };
}

/**
 * A v2 payment whose `accepted` entry is `upto`. The envelope is lenient where @x402/core is
 * (resource, extra, other extensions pass through: the client merges the server's declaration of
 * an extension, its `schema` included, with its own `info`).
 */
export const UptoPayment = z.object({
  x402Version: z.literal(2),
  accepted: z.looseObject({
    scheme: z.literal(SCHEME_UPTO),
    network: z.string().min(3),
    amount: Uint256String,
    asset: HexAddress,
    payTo: HexAddress,
    maxTimeoutSeconds: z.number().positive(),
  }),
  payload: UptoPayload,
  extensions: z.looseObject({ [EIP2612_GAS_SPONSORING]: z.looseObject({ info: z.unknown() }).optional() }).nullish(),
});
export type UptoPayment = z.infer<typeof UptoPayment>;

/** A nonce field as a number; null when it is no uint256. */
export function permit2Nonce(value: string): bigint | null {
  try {
    const nonce = BigInt(value);
    return nonce >= 0n && nonce <= MAX_UINT256 ? nonce : null;
  } catch {
    return null;
  }
}
