// The caller's observed request rate over the last minute, for `rate_per_min` rules. Every
// proxied call is recorded; the count includes the call being evaluated. With Redis the
// window is shared by every replica (an exact sliding log in a sorted set, on Redis's own
// clock); without it each process keeps its own (per-second buckets, fixed memory).
// Not rate-limiter-flexible: its counters are fixed windows, reset when a window ends, while a
// rule on "the last minute" must still count, a second into a window, the calls of 59 s ago.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';

const RATE_WINDOW_MS = 60_000;

export type RateWindow = {
  /** Records one request for `caller` and returns the requests in the window, this one included. */
  hit(caller: string): Promise<number>;
};

export function createMemoryRateWindow(now: () => number = Date.now): RateWindow {
  const seconds = RATE_WINDOW_MS / 1000;
  const windows = new Map<string, { stamps: Float64Array; counts: Uint32Array; last: number }>();
  let lastSweep = 0;
  return {
    async hit(caller) {
      const second = Math.floor(now() / 1000);
      if (second - lastSweep >= seconds) {
        // Forget callers idle for a whole window, so memory follows active callers only.
        lastSweep = second;
        for (const [key, w] of windows) if (second - w.last >= seconds) windows.delete(key);
      }
      let w = windows.get(caller);
      if (!w)
        windows.set(
          caller,
          (w = { stamps: new Float64Array(seconds).fill(-1), counts: new Uint32Array(seconds), last: second }),
        );
      const slot = second % seconds;
      if (w.stamps[slot] !== second) {
        w.stamps[slot] = second;
        w.counts[slot] = 0;
      }
      w.counts[slot] += 1;
      w.last = second;
      let total = 0;
      for (let i = 0; i < seconds; i++) if (w.stamps[i] > second - seconds) total += w.counts[i];
      return total;
    },
  };
}

// KEYS[1] the caller's log; ARGV[1] window in ms, ARGV[2] a unique member suffix.
const SLIDING_LOG = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
redis.call('ZADD', KEYS[1], now, now .. ':' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('ZCARD', KEYS[1])
`;

type WithSlidingLog = Redis & { gwSlidingLog(key: string, windowMs: string, member: string): Promise<number> };

export function createRedisRateWindow(redis: Redis, prefix = 'gw:policy:rate:'): RateWindow {
  // EVALSHA after the first call; ioredis reloads the script if Redis restarted.
  if (!('gwSlidingLog' in redis)) redis.defineCommand('gwSlidingLog', { numberOfKeys: 1, lua: SLIDING_LOG });
  const client = redis as WithSlidingLog;
  return {
    async hit(caller) {
      return Number(await client.gwSlidingLog(prefix + caller, String(RATE_WINDOW_MS), randomBytes(8).toString('hex')));
    },
  };
}
