// Koa middleware shared by the API and the facilitator: the request id, one structured access
// log line per request and HTTP metrics (recorded as access.ts says), and the /metrics endpoint. The log line carries ids and
// figures only: never a header value other than the request id, never a body. A service counts
// what its own routes mean (the API's 429s by limiter) through the `answered` hook.
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import Koa from 'koa';
import type { Context, Next } from 'koa';
import type { Logger } from '../log.ts';
import { activeTraceId } from './spans.ts';
import { routeTemplate } from './route.ts';
import { registry } from './metrics.ts';
import { createAccessRecorder, flushAccessRecords, type AccessFacts } from './access.ts';

/** A caller's X-Request-ID is honored when it is a sane token; anything else is replaced. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Called once per answer, with its route template, after the HTTP metrics are recorded. */
type Answered = (ctx: Context, route: string) => void;

/**
 * The request's one id: the caller's when sane, else a new one. Downstream handlers (the proxy)
 * read the header, so it is rewritten there; the answer carries it.
 */
function identify(ctx: Context): string {
  const given = ctx.get('x-request-id');
  const requestId = REQUEST_ID.test(given) ? given : randomUUID();
  ctx.req.headers['x-request-id'] = requestId;
  ctx.state.requestId = requestId;
  ctx.set('X-Request-ID', requestId);
  return requestId;
}

/**
 * The request id, then, once the request is answered, its HTTP metrics and access line through
 * `record` (lib/observability/access.ts: at once, batched or sampled).
 */
export function observeRequests(
  service: string,
  log: Logger,
  answered?: Answered,
  record: (facts: AccessFacts) => void = createAccessRecorder(service, log),
) {
  return async function observe(ctx: Context, next: Next): Promise<void> {
    const started = performance.now();
    const requestId = identify(ctx);
    try {
      await next();
    } finally {
      // The route template, never the raw URL (unbounded, may hold ids).
      const route = routeTemplate(ctx);
      record({
        requestId,
        invocationId: ctx.response.get('X-Gateway-Invocation-ID') || undefined,
        traceId: activeTraceId(),
        method: ctx.method,
        route,
        status: ctx.status,
        seconds: (performance.now() - started) / 1000,
      });
      answered?.(ctx, route);
    }
  };
}

/** More metrics text for the same scrape: the Temporal SDK's core metrics in a worker process. */
export type ExtraMetrics = () => Promise<string>;

/** GET /metrics in the Prometheus text format: the registry, then `extra` when given. */
function metricsHandler(extra?: ExtraMetrics) {
  return async function serve(ctx: Context, next: Next): Promise<void> {
    if (ctx.path !== '/metrics' || (ctx.method !== 'GET' && ctx.method !== 'HEAD')) return next();
    ctx.state.route = '/metrics';
    ctx.set('Content-Type', registry.contentType);
    // Answers recorded off their requests' path are counted before the registry is read.
    flushAccessRecords();
    const [own, more] = await Promise.all([registry.metrics(), extra?.() ?? '']);
    ctx.body = more ? `${own.trimEnd()}\n${more}` : own;
  };
}

/** A Koa app serving only /metrics: the worker's and the facilitator's metrics listeners. */
function createMetricsApp(extra?: ExtraMetrics): Koa {
  const app = new Koa();
  app.use(metricsHandler(extra));
  return app;
}

/** Listens for scrapes on a port of its own (processes without an HTTP API of their own). */
export async function startMetricsServer(port: number, host: string, extra?: ExtraMetrics): Promise<Server> {
  const server = createMetricsApp(extra).listen(port, host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  return server;
}
