// The facilitator's HTTP surface. Two Koa apps: the mutual-TLS one serves every endpoint
// (/settle, /verify, /supported, /healthz); the open one serves only the read-only /supported
// and /healthz.
import Koa from 'koa';
import Router from '@koa/router';
import type { Logger } from '../lib/log.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { Readiness } from './readiness.ts';
import { settleHandler, type SettleDeps } from './settle.ts';
import { verifyHandler } from './verify.ts';
import { supportedKinds, supportedSigners } from '../facilitator/schemes/index.ts';
import { observeRequests } from '../lib/observability/http.ts';
import { settlements } from '../facilitator/metrics.ts';
import { traceRequests } from '../lib/observability/spans.ts';
import { errorFrames, errorKind } from '../lib/error-kind.ts';

export type FacilitatorDeps = SettleDeps & { config: FacilitatorConfig; readiness: Readiness; log: Logger };

function readOnlyRoutes(deps: Pick<FacilitatorDeps, 'config' | 'readiness'>): Router {
  const router = new Router();
  router.get('/supported', (ctx) => {
    // x402Version beside the v1 contract's three fields: the x402 reference clients' getSupported()
    // requires it on each kind. One kind per scheme the registry holds (facilitator/schemes/).
    // `signers` (x402 v2): who relays the transactions of a scheme whose clients must know it.
    const signers = supportedSigners(deps.config);
    ctx.body = { kinds: supportedKinds(deps.config), ...(signers ? { signers } : {}) };
  });
  router.get('/healthz', async (ctx) => {
    if (ctx.query.ready === undefined) {
      ctx.body = { status: 'ok' };
      return;
    }
    const report = await deps.readiness.probe();
    ctx.status = report.ready ? 200 : 503;
    ctx.body = { status: report.ready ? 'ready' : 'not_ready', checks: report.checks };
  });
  return router;
}

/**
 * Unexpected errors become a bodiless 500, logged by kind and frames: an error's message can
 * quote what a caller sent (a database refusal quotes the value), so it is never logged.
 */
export function errorBoundary(log: Logger) {
  return async (ctx: Koa.Context, next: Koa.Next) => {
    try {
      await next();
    } catch (err) {
      log.error({ err: errorKind(err), at: errorFrames(err), path: ctx.path }, 'unhandled error');
      ctx.body = null;
      ctx.status = 500;
    }
  };
}

export function createPublicApp(deps: Pick<FacilitatorDeps, 'config' | 'readiness' | 'log'>): Koa {
  const app = new Koa();
  const router = readOnlyRoutes(deps);
  app.use(traceRequests('facilitator'));
  app.use(observeRequests('facilitator', deps.log));
  app.use(errorBoundary(deps.log));
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}

/** The /settle outcomes, read from the answer it gives (status and `success`). */
async function observeSettlements(ctx: Koa.Context, next: Koa.Next): Promise<void> {
  await next();
  if (ctx.path !== '/settle' || ctx.method !== 'POST') return;
  const body = ctx.body as { success?: unknown } | null | undefined;
  const outcome =
    ctx.status === 200
      ? body?.success === true
        ? 'settled'
        : 'failed'
      : ctx.status === 429
        ? 'rejected'
        : ctx.status === 503
          ? 'unavailable'
          : ctx.status === 403
            ? 'forbidden'
            : ctx.status === 400
              ? 'malformed'
              : 'error';
  settlements.inc({ service: 'facilitator', outcome });
}

export function createMutualTlsApp(deps: FacilitatorDeps): Koa {
  const app = new Koa();
  const router = readOnlyRoutes(deps);
  router.post('/settle', settleHandler(deps));
  router.post('/verify', verifyHandler(deps));
  // Metrics (request counts and latency, settlement outcomes); served on their own port.
  app.use(traceRequests('facilitator'));
  app.use(observeRequests('facilitator', deps.log));
  app.use(observeSettlements);
  app.use(errorBoundary(deps.log));
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}
