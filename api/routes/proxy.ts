// The /v1 proxy routes: the two invoke endpoints at the token door (api/invoke/transactional.ts,
// api/invoke/streaming.ts; api/invoke/fast-path.ts serves them ahead of the general stack), an
// A2A agent's card, and the poll of a transactional call.
import Router from '@koa/router';
import { agentInvocation } from '../../gateway/invocations/reads.ts';
import { isId } from '../../lib/ids.ts';
import { notFound } from '../errors.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import { tokenDoor } from '../admission/token-door.ts';
import { transactionalRoute } from '../invoke/transactional.ts';
import { streamRoute } from '../invoke/streaming.ts';
import { a2aCardRoute } from '../proxy/a2a-card.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

export function proxyRoutes(deps: AppDeps, services: ProxyParts): Router<AuthState> {
  const router = new Router<AuthState>();
  const door = tokenDoor(deps, services);

  router.post('/proxy/:id', transactionalRoute(deps, services, door));
  router.post('/proxy/:id/stream', streamRoute(deps, services, door));
  router.get('/proxy/:id/.well-known/agent-card.json', a2aCardRoute(deps, services));

  router.get('/proxy/:id/invocations/:invId', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('agt', ctx.params.id) || !isId('inv', ctx.params.invId)) throw notFound();
    const { id: agentId, invId } = ctx.params;
    // A streaming call's row may still be on its way when its id is polled (recent-read.ts).
    const row = await services.recentReads.find(tenantId, invId, () =>
      agentInvocation(deps.orm, tenantId, agentId, invId),
    );
    if (!row) throw notFound();
    // The v1 contract: the body appears once the call is complete, and only when it was captured.
    let responseBody: Buffer | null = null;
    if (row.responseBodyId && (row.status === 'succeeded' || row.status === 'failed')) {
      responseBody = (await services.bodies.get(tenantId, row.responseBodyId))?.content ?? null;
    }
    ctx.body = serializeInvocation(row, responseBody);
  });

  return router;
}
