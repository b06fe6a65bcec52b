// Token buckets. A call takes one token from every bucket it is subject to (its agent's, its
// tenant's and the global one) all or nothing: a call refused by one bucket takes nothing from
// the others. A call the gateway then refuses for what it sent (a body over the cap, one that
// does not parse) gives its tokens back (giveBack), so refused calls cost their tenant nothing.
// Retry-After is the time until every refusing bucket has a token again, in whole seconds,
// at least 1 and at most 60 (docs/API.md "Limits").
// Written here, not with rate-limiter-flexible: its limiters count fixed windows rather than
// refill continuously, and its RateLimiterUnion keeps what the accepting limiters took when
// another refuses, so neither the token bucket nor the all-or-nothing take is expressible.

export type Bucket = {
  /** Bucket name, e.g. `agent:agt_…`, `tenant:…` or `global`. */
  key: string;
  /** Refill rate in tokens per second. */
  rate: number;
  /** Capacity: how many calls may arrive at once after a quiet spell. */
  burst: number;
};

export type Decision = { allowed: true } | { allowed: false; retryAfterSeconds: number; bucket: string };

export interface RateLimiter {
  take(buckets: Bucket[]): Promise<Decision>;
  /** Returns the token an allowed `take` of the same buckets spent (never past a bucket's burst). */
  giveBack(buckets: Bucket[]): Promise<void>;
  close(): Promise<void>;
}

const MAX_RETRY_AFTER_SECONDS = 60;

/** ceil(time until the next token), clamped to [1, 60]. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, Math.ceil(waitMs / 1000)));
}

type State = { tokens: number; at: number };

/**
 * The in-memory limiter: one process, its own monotonic clock. The same arithmetic as the
 * Redis script (redis.ts), so both behave alike.
 */
export function createMemoryLimiter(now: () => number = () => performance.now()): RateLimiter {
  const states = new Map<string, State>();
  let takes = 0;

  function sweep(at: number): void {
    // Full buckets carry no information: forget them so the map stays as small as the busy set.
    for (const [key, state] of states) if (at - state.at > 3_600_000) states.delete(key);
  }

  const refill = (b: Bucket, at: number): number => {
    const state = states.get(b.key) ?? { tokens: b.burst, at };
    return Math.min(b.burst, state.tokens + (Math.max(0, at - state.at) * b.rate) / 1000);
  };

  return {
    async take(buckets) {
      const at = now();
      if (++takes % 10_000 === 0) sweep(at);
      let waitMs = 0;
      let refusing = '';
      const refilled = buckets.map((b) => {
        const tokens = refill(b, at);
        if (tokens < 1) {
          const wait = ((1 - tokens) * 1000) / b.rate;
          if (wait > waitMs) {
            waitMs = wait;
            refusing = b.key;
          }
        }
        return tokens;
      });
      const allowed = waitMs === 0;
      buckets.forEach((b, i) => states.set(b.key, { tokens: allowed ? refilled[i] - 1 : refilled[i], at }));
      return allowed
        ? { allowed: true }
        : { allowed: false, retryAfterSeconds: retryAfterSeconds(waitMs), bucket: refusing };
    },
    async giveBack(buckets) {
      const at = now();
      for (const b of buckets) states.set(b.key, { tokens: Math.min(b.burst, refill(b, at) + 1), at });
    },
    async close() {
      states.clear();
    },
  };
}
