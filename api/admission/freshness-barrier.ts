// GATE_CACHE_FRESHNESS=strict (docs/PROXY.md): every agent or policy change committed before a
// proxied call is applied to this process's caches before they answer it: one round trip on
// the change feed, shared by concurrent calls, sent as the request arrives. `acknowledged`
// waits for nothing: a change made through the API was applied here before its writer
// answered (gateway/gate-freshness.ts).
import type { IncomingMessage } from 'node:http';
import type { Context, Next } from 'koa';
import type { AppDeps } from '../deps.ts';

// strict: the barrier of each proxied call, sent as the request arrives (syncGateCaches).
const barriers = new WeakMap<IncomingMessage, Promise<void>>();

/**
 * Koa middleware, first in the app. strict: a proxied call's barrier is sent as soon as its
 * request has arrived, so the round trip overlaps auth and routing instead of following them;
 * it is still sent after the call arrived, which is all the guarantee needs. Concurrent calls,
 * and callers that turn out to be unauthenticated, share round trips (ChangeFeed.sync).
 */
export function syncGateCaches(deps: AppDeps) {
  const strict = deps.config.gateFreshness === 'strict';
  return function sendGateBarrier(ctx: Context, next: Next): Promise<void> {
    // A public agent's URLs, any method: the page or challenge of a just-closed agent is a 404 too.
    const gated =
      (ctx.method === 'POST' && ctx.path.startsWith('/v1/proxy/')) || ctx.path.startsWith('/public/agents/');
    if (strict && gated) barriers.set(ctx.req, deps.feed.sync());
    return next();
  };
}

/**
 * strict: the barrier this call waits on before the agent read (and so before the policy read
 * of the policy stage), the one sent as it arrived or a new one; null when nothing is awaited.
 */
export function cacheBarrier(ctx: Pick<Context, 'req'>, deps: AppDeps): Promise<void> | null {
  return deps.config.gateFreshness === 'strict' ? (barriers.get(ctx.req) ?? deps.feed.sync()) : null;
}
