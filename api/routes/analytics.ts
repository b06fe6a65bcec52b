// GET /v1/analytics: per-agent, per-bucket invocation figures from the hourly rollups. The
// endpoint has its own per-caller token bucket (429 with Retry-After), taken before the
// parameters are even read: a caller hammering it with bad queries spends tokens too.
import Router from '@koa/router';
import { ApiError } from '../errors.ts';
import { parseAnalyticsQuery, parseCallerAnalyticsQuery } from '../analytics/params.ts';
import { createCallerAnalyticsReader } from '../../gateway/analytics/callers.ts';
import { createAnalyticsReader } from '../../gateway/analytics/query.ts';
import { createMemoryLimiter, createRedisLimiter, type Limiter } from '../../gateway/analytics/limiter.ts';
import { redisClient } from '../../gateway/policy/redis.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

function analyticsLimiter(deps: AppDeps): Limiter {
  const shape = { perMinute: deps.config.analytics.ratePerMin, burst: deps.config.analytics.burst };
  if (!deps.config.redisUrl) return createMemoryLimiter(shape);
  return createRedisLimiter(redisClient(deps.config.redisUrl, deps.log), shape, (err) =>
    deps.log.warn({ err: err.message }, 'analytics limiter unavailable; request let through'),
  );
}

export function analyticsRoutes(deps: AppDeps, limiter: Limiter = analyticsLimiter(deps)): Router<AuthState> {
  const router = new Router<AuthState>();
  const reader = createAnalyticsReader(deps.orm, deps.log);

  const callers = createCallerAnalyticsReader(deps.orm);
  // Both endpoints spend the same per-caller bucket.
  const take = async (ctx: { state: AuthState }) => {
    const { tenantId, userId } = ctx.state.caller;
    const verdict = await limiter.take(JSON.stringify([tenantId, userId]));
    if (!verdict.allowed)
      throw new ApiError(429, 'analytics rate limit exceeded', { 'Retry-After': String(verdict.retryAfterSeconds) });
    return tenantId;
  };

  router.get('/analytics', async (ctx) => {
    const tenantId = await take(ctx);
    const query = parseAnalyticsQuery(ctx.query);
    const json = await reader.queryJson(tenantId, query);
    ctx.type = 'json';
    ctx.body = json;
  });

  // Per caller (a public agent's payers among them), beside the per-agent figures above.
  router.get('/analytics/callers', async (ctx) => {
    const tenantId = await take(ctx);
    const query = parseCallerAnalyticsQuery(ctx.query);
    const { groups, truncated } = await callers.query(tenantId, query);
    ctx.body = {
      range: { since: query.since.toISOString(), until: query.until.toISOString() },
      bucket: query.bucket,
      groups,
      truncated,
    };
  });

  return router;
}
