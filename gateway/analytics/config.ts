// Analytics settings: the endpoint's own per-caller token bucket, tighter than the global
// proxy limiter (RATE_LIMIT_GLOBAL_*): 30 queries a minute with a burst of 10 by default.
import { z } from 'zod';
import { parseEnv } from '../../lib/config.ts';

const AnalyticsEnv = z.object({
  ANALYTICS_RATE_PER_MIN: z.coerce.number().positive().default(30),
  ANALYTICS_RATE_BURST: z.coerce.number().int().positive().default(10),
});

export type AnalyticsConfig = { ratePerMin: number; burst: number };

export function loadAnalyticsConfig(env: NodeJS.ProcessEnv): AnalyticsConfig {
  const e = parseEnv(AnalyticsEnv, env);
  return { ratePerMin: e.ANALYTICS_RATE_PER_MIN, burst: e.ANALYTICS_RATE_BURST };
}
