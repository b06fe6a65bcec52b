// The API's request-level metrics (docs/OBSERVABILITY.md), defined with
// lib/observability/metrics.ts's helpers; the gateway's domain metrics are in gateway/metrics.ts.
import type { Context } from 'koa';
import { counter } from '../lib/observability/metrics.ts';

export const readinessChecks = counter({
  name: 'gateway_readiness_checks_total',
  help: 'Database and Temporal checks run for /readyz (at most one per second, whatever the probe rate)',
});

const rateLimitRejections = counter({
  name: 'gateway_rate_limit_rejections_total',
  help: 'Requests rejected with 429, by limiter (agent: per-agent invocation limit; analytics: per-caller analytics limit)',
  labelNames: ['limiter'] as const,
});

/** Counts a 429 under the limiter its route has (observeRequests calls it for every answer). */
export function countRateLimitRejection(ctx: Context, route: string): void {
  if (ctx.status !== 429) return;
  // A budget's refusal is no rate limit: gateway_budget_refusals_total counts it, by budget.
  if ((ctx.body as { budget_id?: unknown } | undefined)?.budget_id !== undefined) return;
  const limiter = route.startsWith('/v1/analytics') ? 'analytics' : route.startsWith('/v1/proxy') ? 'agent' : 'other';
  rateLimitRejections.inc({ limiter });
}
