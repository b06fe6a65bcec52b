// GET /v1/analytics: per-agent, per-bucket invocation figures from the hourly rollups. The
// endpoint has its own per-caller token bucket (429 with Retry-After), taken before the
// parameters are even read: a caller hammering it with bad queries spends tokens too.
import Router from '@koa/router';
import { ApiError } from '../errors.ts';
import { parseAnalyticsQuery } from '../analytics/params.ts';
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

  router.get('/analytics', async (ctx) => {
    const { tenantId, userId } = ctx.state.caller;
    const verdict = await limiter.take(JSON.stringify([tenantId, userId]));
    if (!verdict.allowed)
      throw new ApiError(429, 'analytics rate limit exceeded', { 'Retry-After': String(verdict.retryAfterSeconds) });
    const query = parseAnalyticsQuery(ctx.query);
    ctx.body = await reader.query(tenantId, query);
  });

  return router;
}
