// The analytics endpoint's own per-caller (tenant + user) token bucket: analytics queries
// are the expensive reads, so they get a budget tighter than any global limit. In memory per
// process by default; shared through Redis (the proxy limiter's Lua script, on Redis's clock) when configured.
// Redis unreachable: the limiter lets the request through (fails open) and says so in the
// log; a limiter outage must not turn into an analytics outage.
// A token bucket like the proxy's (not rate-limiter-flexible's fixed window): ANALYTICS_RATE_BURST
// is a bucket's depth, and a refused caller waits for one token, not for a window to end.
import type { Redis } from 'ioredis';
import { createMemoryLimiter as createTokenBuckets, retryAfterSeconds } from '../ratelimit/limiter.ts';
import { TAKE_SCRIPT, type WithTake } from '../ratelimit/redis.ts';

type LimitVerdict = { allowed: true } | { allowed: false; retryAfterSeconds: number };

export type Limiter = { take(caller: string): Promise<LimitVerdict> };

export type BucketShape = { perMinute: number; burst: number };

/** The proxy's in-memory token buckets (gateway/ratelimit/limiter.ts), one per caller. */
export function createMemoryLimiter(shape: BucketShape): Limiter {
  const buckets = createTokenBuckets();
  const rate = shape.perMinute / 60;
  return {
    async take(caller) {
      const decision = await buckets.take([{ key: caller, rate, burst: shape.burst }]);
      return decision.allowed ? decision : { allowed: false, retryAfterSeconds: decision.retryAfterSeconds };
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
