// The analytics endpoint's own per-caller (tenant + user) token bucket: analytics queries
// are the expensive reads, so they get a budget tighter than any global limit. In memory per
// process by default; shared through Redis (a Lua script on Redis's clock) when configured.
// Redis unreachable: the limiter lets the request through (fails open) and says so in the
// log; a limiter outage must not turn into an analytics outage.
import type { Redis } from 'ioredis';

export type LimitVerdict = { allowed: true } | { allowed: false; retryAfterSeconds: number };

export type Limiter = { take(caller: string): Promise<LimitVerdict> };

export type BucketShape = { perMinute: number; burst: number };

/** Retry-After: whole seconds until the next token, at least 1, at most 60. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.min(60, Math.max(1, Math.ceil(waitMs / 1000)));
}

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

// KEYS[1] bucket; ARGV: burst, tokens per ms, ttl ms. Returns {allowed, wait ms}.
const TOKEN_BUCKET = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = math.ceil((1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {allowed, wait}
`;

type WithBucket = Redis & {
  gwTokenBucket(key: string, burst: string, perMs: string, ttlMs: string): Promise<[number, number]>;
};

export function createRedisLimiter(
  redis: Redis,
  shape: BucketShape,
  onError: (err: Error) => void,
  prefix = 'gw:analytics:limit:',
): Limiter {
  if (!('gwTokenBucket' in redis)) redis.defineCommand('gwTokenBucket', { numberOfKeys: 1, lua: TOKEN_BUCKET });
  const client = redis as WithBucket;
  const perMs = shape.perMinute / 60_000;
  const ttlMs = Math.ceil((shape.burst / perMs) * 2) + 1000;
  return {
    async take(caller) {
      try {
        const [allowed, wait] = await client.gwTokenBucket(
          prefix + caller,
          String(shape.burst),
          String(perMs),
          String(ttlMs),
        );
        return Number(allowed) === 1
          ? { allowed: true }
          : { allowed: false, retryAfterSeconds: retryAfterSeconds(Number(wait)) };
      } catch (err) {
        onError(err as Error);
        return { allowed: true };
      }
    },
  };
}
