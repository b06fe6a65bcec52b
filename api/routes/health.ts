// Probes and build metadata; no authentication.
import Router from '@koa/router';
import type { AppDeps } from '../deps.ts';

export function healthRoutes(deps: AppDeps): Router {
  const router = new Router();
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  router.get('/readyz', async (ctx) => {
    const checks = await deps.readiness();
    ctx.status = Object.values(checks).every(Boolean) ? 200 : 503;
    ctx.body = { status: ctx.status === 200 ? 'ready' : 'not_ready', checks };
  });
  router.get('/version', (ctx) => {
    ctx.body = deps.version;
  });
  return router;
}
