// Analytics settings: the endpoint's own per-caller token bucket, tighter than the global
// proxy limiter (RATE_LIMIT_GLOBAL_*): 30 queries a minute with a burst of 10 by default; and
// how often each API process tries a fold round (gateway/analytics/fold.ts): every second by
// default, so the rollups lag the rows by about that; 0 runs none (another process folds).
import { z } from 'zod';
import { parseEnv } from '../../lib/config.ts';

const AnalyticsEnv = z.object({
  ANALYTICS_RATE_PER_MIN: z.coerce.number().positive().default(30),
  ANALYTICS_RATE_BURST: z.coerce.number().int().positive().default(10),
  ANALYTICS_FOLD_EVERY_MS: z.coerce.number().int().min(0).max(60_000).default(1_000),
});

export type AnalyticsConfig = { ratePerMin: number; burst: number; foldEveryMs: number };

export function loadAnalyticsConfig(env: NodeJS.ProcessEnv): AnalyticsConfig {
  const e = parseEnv(AnalyticsEnv, env);
  return {
    ratePerMin: e.ANALYTICS_RATE_PER_MIN,
    burst: e.ANALYTICS_RATE_BURST,
    foldEveryMs: e.ANALYTICS_FOLD_EVERY_MS,
  };
}
