// The `exact` scheme's wire objects on an EVM network: its payload is an EIP-3009
// `transferWithAuthorization` (the authorization and the payer's signature over it). The
// envelope around it (x402/schemas.ts, x402/v2.ts) is every scheme's.
import { z } from 'zod';
import {
  Bytes32Hex,
  HexAddress,
  PaymentRequirements,
  SignatureHex,
  Uint256String,
  type Payment,
  type SettleRequest,
} from '../../schemas.ts';

/** The scheme's name on the wire (`scheme` of requirements and payments). */
export const EXACT = 'exact';

export const TransferAuthorization = z.object({
  from: HexAddress,
  to: HexAddress,
  value: Uint256String,
  validAfter: Uint256String,
  validBefore: Uint256String,
  nonce: Bytes32Hex,
});
export type TransferAuthorization = z.infer<typeof TransferAuthorization>;

/** The payload of an `exact` payment: what x402 clients sign and send. */
export const ExactPayload = z.object({ signature: SignatureHex, authorization: TransferAuthorization });
type ExactPayload = z.infer<typeof ExactPayload>;

/** A payment whose payload is an `exact` one (its `scheme` field is checked by verify.ts, not here). */
export type ExactPayment = Omit<Payment, 'payload'> & { payload: ExactPayload };

/** A settle request carrying an `exact` payload: what the facilitator's settlement steps take. */
export type ExactSettleRequest = Omit<SettleRequest, 'paymentPayload'> & { paymentPayload: ExactPayment };

const ExactSettleRequestSchema = z.object({
  x402Version: z.number().int(),
  paymentPayload: z.object({
    x402Version: z.number().int(),
    scheme: z.string(),
    network: z.string(),
    payload: ExactPayload,
  }),
  paymentRequirements: PaymentRequirements,
});

/** The `exact` payload, parsed (unknown keys dropped); null when it is not one. */
export function parseExactPayload(payload: unknown): ExactPayload | null {
  const parsed = ExactPayload.safeParse(payload);
  return parsed.success ? parsed.data : null;
}

/** The payment with its payload parsed as an `exact` one; null when it is not one. */
export function asExactPayment(payment: Payment): ExactPayment | null {
  const payload = parseExactPayload(payment.payload);
  return payload && { ...payment, payload };
}

/** The settle request with its payload parsed as an `exact` one; null when it is not one. */
export function asExactSettleRequest(request: SettleRequest): ExactSettleRequest | null {
  const parsed = ExactSettleRequestSchema.safeParse(request);
  return parsed.success ? parsed.data : null;
}
