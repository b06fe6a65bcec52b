// POST /verify (x402 v2): the client certificate maps to an active account (403), the body is
// JSON (400), and the scheme that verifies its requirements' (scheme, network) answers
// (facilitator/schemes/: batch-settlement's, which the spec has servers ask of deposits and
// refunds). A kind no scheme verifies is `{isValid: false, invalidReason: "unsupported_scheme"}`.
// Nothing is stored, signed or sent.
import type { Context } from 'koa';
import { verifiersFor } from '../facilitator/schemes/index.ts';
import { v2SettleKind } from '../x402/schemes/upto/settle-request.ts';
import { admit, reply, schemeDeps, type SettleDeps } from './settle.ts';

export function verifyHandler(deps: SettleDeps) {
  const verifierOf = verifiersFor(schemeDeps(deps));
  return async function verify(ctx: Context): Promise<void> {
    const admitted = await admit(ctx, deps, 'verify');
    if (!admitted) return;
    const kind = v2SettleKind(admitted.body);
    const verifier = kind ? verifierOf(kind.scheme, kind.network) : null;
    if (!verifier) return reply(ctx, 200, { isValid: false, invalidReason: 'unsupported_scheme', payer: '' });
    const verified = await verifier(admitted.body);
    switch (verified.answer) {
      case 'verified':
        return reply(ctx, 200, verified.response);
      case 'malformed':
        return reply(ctx, 400, { error: 'malformed verify request' });
      case 'unavailable':
        return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    }
  };
}
