// The facilitator's HTTP surface. Two Koa apps: the mutual-TLS one serves all three
// endpoints; the open one serves only the read-only /supported and /healthz.
import Koa from 'koa';
import Router from '@koa/router';
import { getAddress, JsonRpcProvider } from 'ethers';
import type { FacilitatorConfig } from './config.ts';

export type FacilitatorDeps = { config: FacilitatorConfig; provider: JsonRpcProvider };

function readOnlyRoutes(deps: FacilitatorDeps): Router {
  const router = new Router();
  router.get('/supported', (ctx) => {
    ctx.body = { kinds: [{ scheme: 'exact', network: 'base', asset: getAddress(deps.config.tokenAddress) }] };
  });
  router.get('/healthz', async (ctx) => {
    if (ctx.query.ready === undefined) {
      ctx.body = { status: 'ok' };
      return;
    }
    const rpc = await deps.provider.getBlockNumber().then(() => true, () => false);
    ctx.status = rpc ? 200 : 503;
    ctx.body = { status: rpc ? 'ready' : 'not_ready', checks: { rpc } };
  });
  return router;
}

export function createPublicApp(deps: FacilitatorDeps): Koa {
  const app = new Koa();
  const router = readOnlyRoutes(deps);
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}

export function createMutualTlsApp(deps: FacilitatorDeps): Koa {
  const app = new Koa();
  const router = readOnlyRoutes(deps);
  router.post('/settle', (ctx) => {
    // Settlement arrives with the x402 issue; until then say so plainly rather than pretend.
    ctx.status = 503;
    ctx.set('Retry-After', '60');
    ctx.body = { error: 'settlement not available' };
  });
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}
