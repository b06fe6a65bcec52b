// Probes and build metadata; no authentication.
import Router from '@koa/router';
import type { AppDeps } from '../deps.ts';
import type { StartBacklog } from '../proxy/start-backlog.ts';

/**
 * /readyz: ready while the database answers and the start backlog has room. Temporal is
 * reported, not required: transactional calls are accepted while it is away (their workflows
 * started once it is back), up to the backlog's bound; streaming calls do not use it.
 */
export function healthRoutes(deps: AppDeps, backlog: StartBacklog): Router {
  const router = new Router();
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  router.get('/readyz', async (ctx) => {
    const probed = await deps.readiness();
    const checks = { database: probed.database, start_backlog: backlog.size() < backlog.limit };
    ctx.status = checks.database && checks.start_backlog ? 200 : 503;
    ctx.body = {
      status: ctx.status === 200 ? 'ready' : 'not_ready',
      checks,
      temporal: probed.temporal ? 'reachable' : 'unreachable',
      start_backlog: { accepted_unstarted: backlog.size(), limit: backlog.limit },
    };
  });
  router.get('/version', (ctx) => {
    ctx.body = deps.version;
  });
  return router;
}
