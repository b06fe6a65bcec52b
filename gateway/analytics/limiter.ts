// The analytics endpoint's own per-caller (tenant + user) token bucket: analytics queries
// are the expensive reads, so they get a budget tighter than any global limit. In memory per
// process by default; shared through Redis (the proxy limiter's Lua script, on Redis's clock) when configured.
// Redis unreachable: the limiter lets the request through (fails open) and says so in the
// log; a limiter outage must not turn into an analytics outage.
import type { Redis } from 'ioredis';
import { retryAfterSeconds } from '../ratelimit/limiter.ts';
import { TAKE_SCRIPT, type WithTake } from '../ratelimit/redis.ts';

type LimitVerdict = { allowed: true } | { allowed: false; retryAfterSeconds: number };

export type Limiter = { take(caller: string): Promise<LimitVerdict> };

export type BucketShape = { perMinute: number; burst: number };

export function createMemoryLimiter(shape: BucketShape, now: () => number = Date.now): Limiter {
  const perMs = shape.perMinute / 60_000;
  const refillMs = shape.burst / perMs;
  const buckets = new Map<string, { tokens: number; at: number }>();
  return {
    async take(caller) {
      const t = now();
      const b = buckets.get(caller) ?? { tokens: shape.burst, at: t };
      b.tokens = Math.min(shape.burst, b.tokens + (t - b.at) * perMs);
      b.at = t;
      buckets.set(caller, b);
      // A bucket idle long enough to be full again is the same as no bucket: forget it.
      if (buckets.size > 10_000) for (const [k, v] of buckets) if (t - v.at >= refillMs) buckets.delete(k);
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return { allowed: true };
      }
      return { allowed: false, retryAfterSeconds: retryAfterSeconds((1 - b.tokens) / perMs) };
    },
  };
}

export function createRedisLimiter(
  redis: Redis,
  shape: BucketShape,
  onError: (err: Error) => void,
  prefix = 'gw:analytics:limit:',
): Limiter {
  // The proxy's token-bucket script (gateway/ratelimit/redis.ts), with one bucket.
  if (!('gwTakeTokens' in redis)) redis.defineCommand('gwTakeTokens', { lua: TAKE_SCRIPT });
  const client = redis as WithTake;
  const ratePerSecond = String(shape.perMinute / 60);
  return {
    async take(caller) {
      try {
        const [allowed, waitMs] = await client.gwTakeTokens(1, prefix + caller, ratePerSecond, String(shape.burst));
        return Number(allowed) === 1
          ? { allowed: true }
          : { allowed: false, retryAfterSeconds: retryAfterSeconds(waitMs) };
      } catch (err) {
        onError(err as Error);
        return { allowed: true };
      }
    },
  };
}
