// The `upto` scheme as the protocol registry (x402/schemes/index.ts) knows it: its payload is the
// Permit2 authorization and its signature (schemas.ts); the payer is the authorization's `from`.
import type { SchemeProtocol } from '../scheme.ts';
import { SCHEME_UPTO, UptoPayment } from './schemas.ts';

const UptoPayload = UptoPayment.shape.payload;

function parseUptoPayload(payload: unknown) {
  const parsed = UptoPayload.safeParse(payload);
  return parsed.success ? parsed.data : null;
}

export const uptoProtocol: SchemeProtocol = {
  name: SCHEME_UPTO,
  parsePayload: parseUptoPayload,
  payerOf: (payload) => parseUptoPayload(payload)?.permit2Authorization.from ?? '',
};
