// The shared limiter: every replica takes tokens from the same buckets in Redis. ONE Lua
// script does the whole decision atomically, on Redis's own clock (TIME), so replicas with
// skewed clocks still agree and no two replicas can spend the same token.
// (Not rate-limiter-flexible's RateLimiterRedis: it counts fixed windows; limiter.ts says why.)
import { Redis } from 'ioredis';
import { retryAfterSeconds, type Bucket, type Decision, type RateLimiter } from './limiter.ts';

// The decision as a Lua function over the buckets' keys and their rate and burst pairs, so a
// script that does more in the same round trip (the budget reservation of a call's admission,
// gateway/budgets/redis-ledger.ts) takes tokens exactly as the limiter's own script does.
// Returns {allowed (1|0), wait in ms until every refusing bucket has a token, 1-based index of the slowest}.
export const TAKE_FUNCTION = `
local function take_tokens(keys, argv)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  local n = #keys
  local tokens = {}
  local wait = 0
  local slowest = 0
  for i = 1, n do
    local rate = tonumber(argv[2 * i - 1])
    local burst = tonumber(argv[2 * i])
    local state = redis.call('HMGET', keys[i], 'tokens', 'at')
    local have = tonumber(state[1])
    local at = tonumber(state[2])
    if have == nil or at == nil then
      have = burst
      at = now
    end
    local elapsed = now - at
    if elapsed < 0 then elapsed = 0 end
    have = math.min(burst, have + elapsed * rate / 1000)
    tokens[i] = have
    if have < 1 then
      local w = (1 - have) * 1000 / rate
      if w > wait then
        wait = w
        slowest = i
      end
    end
  end
  local allowed = 0
  if wait == 0 then allowed = 1 end
  for i = 1, n do
    local rate = tonumber(argv[2 * i - 1])
    local burst = tonumber(argv[2 * i])
    local left = tokens[i]
    if allowed == 1 then left = left - 1 end
    redis.call('HSET', keys[i], 'tokens', tostring(left), 'at', tostring(now))
    -- A bucket left alone refills completely within burst/rate seconds; then it need not exist.
    redis.call('PEXPIRE', keys[i], math.ceil(burst * 1000 / rate) + 1000)
  end
  return {allowed, math.ceil(wait), slowest}
end
`;

// KEYS: one hash per bucket {tokens, at}. ARGV: rate and burst per bucket, in KEYS order.
export const TAKE_SCRIPT = `${TAKE_FUNCTION}
return take_tokens(KEYS, ARGV)
`;

// The same buckets, refilled as above, each given one token back (at most its burst). A bucket
// that has expired is full already and stays absent.
const GIVE_BACK_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local have = tonumber(state[1])
  local at = tonumber(state[2])
  if have ~= nil and at ~= nil then
    local elapsed = now - at
    if elapsed < 0 then elapsed = 0 end
    have = math.min(burst, have + elapsed * rate / 1000 + 1)
    redis.call('HSET', KEYS[i], 'tokens', tostring(have), 'at', tostring(now))
    redis.call('PEXPIRE', KEYS[i], math.ceil(burst * 1000 / rate) + 1000)
  end
end
return 1
`;

/** Key namespace; deployments (or test runs) sharing one Redis keep their buckets apart with their own. */
const DEFAULT_PREFIX = 'gw:rl:';

export type WithTake = Redis & {
  gwTakeTokens(numKeys: number, ...args: Array<string | number>): Promise<[number, number, number]>;
  gwGiveBackTokens(numKeys: number, ...args: Array<string | number>): Promise<number>;
};

/** The Redis limiter: its buckets' keys and arguments as TAKE_FUNCTION takes them, for a script that takes them too. */
export type RedisRateLimiter = RateLimiter & {
  takeArgs(buckets: Bucket[]): { keys: string[]; args: string[] };
  /** Its answer to TAKE_FUNCTION's return: the same decision `take` makes of it. */
  decisionOf(buckets: Bucket[], answer: [number, number, number]): Decision;
};

export function createRedisLimiter(
  url: string,
  opts: { onError?: (err: Error) => void; prefix?: string } = {},
): RedisRateLimiter {
  const prefix = opts.prefix ?? DEFAULT_PREFIX;
  const redis = new Redis(url, {
    // A limiter that waits on a sick Redis would stall every call: fail fast instead.
    maxRetriesPerRequest: 1,
    commandTimeout: 500,
    connectTimeout: 2_000,
    lazyConnect: false,
  }) as WithTake;
  redis.on('error', (err: Error) => opts.onError?.(err));
  redis.defineCommand('gwTakeTokens', { lua: TAKE_SCRIPT });
  redis.defineCommand('gwGiveBackTokens', { lua: GIVE_BACK_SCRIPT });
  const takeArgs = (buckets: Bucket[]) => ({
    keys: buckets.map((b) => prefix + b.key),
    args: buckets.flatMap((b) => [String(b.rate), String(b.burst)]),
  });
  const argsOf = (buckets: Bucket[]) => {
    const { keys, args } = takeArgs(buckets);
    return [...keys, ...args];
  };
  const decisionOf = (buckets: Bucket[], [allowed, waitMs, slowest]: [number, number, number]): Decision =>
    allowed === 1
      ? { allowed: true }
      : { allowed: false, retryAfterSeconds: retryAfterSeconds(waitMs), bucket: buckets[slowest - 1]?.key ?? '' };

  return {
    takeArgs,
    decisionOf,
    async take(buckets: Bucket[]): Promise<Decision> {
      try {
        return decisionOf(buckets, await redis.gwTakeTokens(buckets.length, ...argsOf(buckets)));
      } catch (err) {
        // Fail open: an unreachable Redis must not take the gateway down with it (logged by the caller's onError).
        opts.onError?.(err as Error);
        return { allowed: true };
      }
    },
    async giveBack(buckets: Bucket[]): Promise<void> {
      // A token not given back only makes the limit stricter for a moment: logged, never the call's failure.
      await redis.gwGiveBackTokens(buckets.length, ...argsOf(buckets)).catch((err: Error) => opts.onError?.(err));
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
