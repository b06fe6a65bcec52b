// The `upto` scheme as the protocol registry (x402/schemes/index.ts) knows it: its payload is the
// Permit2 authorization and its signature (schemas.ts); the payer is the authorization's `from`.
import { schemaProtocol } from '../scheme.ts';
import { SCHEME_UPTO, UptoPayment } from './schemas.ts';

export const uptoProtocol = schemaProtocol(
  SCHEME_UPTO,
  UptoPayment.shape.payload,
  (payload) => payload.permit2Authorization.from,
);
