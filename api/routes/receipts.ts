// Receipts: GET /v1/invocations/{inv_id}/receipt (tenant-scoped, 404 until signed or when
// the agent emits none) and the public keys that verify them, GET /.well-known/jwks.json
// (no auth: verification must be possible for anyone holding a receipt).
import Router from '@koa/router';
import { isId } from '../../lib/ids.ts';
import { notFound } from '../errors.ts';
import { createReceiptStore } from '../../gateway/receipts/store.ts';
import { keyRingLoader } from '../../gateway/receipts/keys.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

export function receiptRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();
  const store = createReceiptStore(deps.orm);

  router.get('/invocations/:invId/receipt', async (ctx) => {
    if (!isId('inv', ctx.params.invId)) throw notFound();
    const receipt = await store.get(ctx.state.caller.tenantId, ctx.params.invId);
    if (!receipt) throw notFound('no receipt for this invocation');
    ctx.body = {
      invocation_id: receipt.invocationId,
      agent_id: receipt.agentId,
      kid: receipt.kid,
      alg: 'EdDSA',
      format: 'jws-compact',
      receipt: receipt.jws,
      created_at: receipt.createdAt.toISOString(),
    };
  });

  return router;
}

export function jwksRoutes(deps: AppDeps): Router {
  const router = new Router();
  // The publisher only reads the folder; the worker creates the first key when it signs.
  const keys = keyRingLoader(deps.config.receipts, { create: false });
  router.get('/.well-known/jwks.json', (ctx) => {
    const ring = keys();
    ctx.set('Cache-Control', 'public, max-age=300');
    ctx.body = { keys: ring ? ring.keys.map((k) => k.publicJwk) : [] };
  });
  return router;
}
