// The `exact` scheme as the protocol registry (x402/schemes/index.ts) knows it.
import type { SchemeProtocol } from '../scheme.ts';
import { EXACT, parseExactPayload } from './schemas.ts';

export const exactProtocol: SchemeProtocol = {
  name: EXACT,
  parsePayload: parseExactPayload,
  payerOf: (payload) => parseExactPayload(payload)?.authorization.from ?? '',
};
