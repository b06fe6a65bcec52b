// Which (tenant, upstream origin) circuits are open, for the payment gate: a paid call whose
// upstream's breaker is open would be charged and then fail fast without reaching it, so the
// gate refuses it before the payment stage (docs/PROXY.md, "Breaker"). The breakers that open
// are the ones of whatever process made the calls (an API's streaming calls, a worker's
// transactional ones); they announce here when they open, for their open period. A closing is
// not announced: a breaker closes only after its own period has ended, so its announcement has
// expired by then, and another breaker of the same circuit that opened later is still failing
// calls fast until its own period ends.
// - In memory: one table per process, shared by every breaker registry in it (an API and a
//   worker run in one process share what they know).
// - With REDIS_URL: an opening is also written to Redis as a key whose TTL is the open period
//   (every breaker has the same period, so a later opening never shortens an earlier one),
//   so every API replica learns what any worker or replica's breaker knows. Reads are cached
//   for a second per circuit; Redis away fails open (not refused here; the breaker still fails
//   the call fast), like the rate limiter: an outage of Redis must not refuse every paid call.
import { createHash } from 'node:crypto';
import type { Logger } from '../../lib/log.ts';
import { redisClient } from '../policy/redis.ts';

export type OpenCircuits = {
  /** A breaker of `key` opened: calls fail fast for `forMs`, then one probe is let through. */
  opened(key: string, forMs: number): void;
  /** Milliseconds until the circuit of `key` may half-open; 0 when it is not known to be open. */
  openFor(key: string): Promise<number>;
};

/** The circuit of a tenant's calls to an upstream: its origin (scheme, host and port). */
export function circuitKey(url: string, tenantId = ''): string {
  return `${tenantId}\0${new URL(url).origin}`;
}

/** At most this many circuits remembered per table; the same bound as the breakers themselves. */
const MAX_ENTRIES = 10_000;
/** How long a Redis read (open or not) is trusted before it is asked again. */
const REDIS_READ_CACHE_MS = 1_000;
const REDIS_PREFIX = 'gw:circuit:';

/** Keeps `map` within MAX_ENTRIES: expired entries first, then the oldest. */
function trim<V>(map: Map<string, V>, expired: (v: V) => boolean): void {
  if (map.size < MAX_ENTRIES) return;
  for (const [k, v] of map) if (expired(v)) map.delete(k);
  for (const k of map.keys()) {
    if (map.size < MAX_ENTRIES) break;
    map.delete(k);
  }
}

/** A table of open circuits in this process's memory (until when each stays open, epoch ms). */
export function createMemoryCircuits(): OpenCircuits {
  const until = new Map<string, number>();
  return {
    opened(key, forMs) {
      const later = Math.max(until.get(key) ?? 0, Date.now() + forMs);
      until.delete(key);
      trim(until, (u) => u <= Date.now());
      until.set(key, later);
    },
    openFor(key) {
      const left = (until.get(key) ?? 0) - Date.now();
      if (left <= 0) until.delete(key);
      return Promise.resolve(Math.max(0, left));
    },
  };
}

/** This process's table: the default of every upstream client created in it. */
const processCircuits = createMemoryCircuits();

function redisCircuits(url: string, local: OpenCircuits, log?: Logger): OpenCircuits {
  // Created on first use: a process whose breakers never open never connects for them.
  const redis = () => redisClient(url, log);
  // Tenant ids and origins are the tenants' own text: hashed into fixed-size keys.
  const redisKey = (key: string) => REDIS_PREFIX + createHash('sha256').update(key).digest('hex');
  const reads = new Map<string, { at: number; until: Promise<number> }>();
  let lastWarn = 0;
  const failOpen = (err: Error): number => {
    if (Date.now() - lastWarn > 30_000) {
      lastWarn = Date.now();
      log?.warn({ err: err.message }, 'open circuits unavailable in redis; paid calls not checked against them');
    }
    return 0;
  };
  return {
    opened(key, forMs) {
      local.opened(key, forMs);
      reads.delete(key);
      const until = Date.now() + forMs;
      redis()
        .set(redisKey(key), String(until), 'PX', Math.max(1, Math.ceil(forMs)))
        .catch(failOpen);
    },
    async openFor(key) {
      const own = await local.openFor(key);
      if (own > 0) return own;
      let read = reads.get(key);
      if (!read || Date.now() - read.at > REDIS_READ_CACHE_MS) {
        const at = Date.now();
        read = {
          at,
          until: redis()
            .pttl(redisKey(key))
            .then((ttl) => (ttl > 0 ? at + ttl : 0), failOpen),
        };
        reads.delete(key);
        trim(reads, (r) => Date.now() - r.at > REDIS_READ_CACHE_MS);
        reads.set(key, read);
      }
      return Math.max(0, (await read.until) - Date.now());
    },
  };
}

/**
 * The open circuits a process's breakers publish to and its payment gate reads: this process's
 * table (or `local`), and Redis too when `redisUrl` is set.
 */
export function createOpenCircuits(opts: { redisUrl?: string; log?: Logger; local?: OpenCircuits } = {}): OpenCircuits {
  const local = opts.local ?? processCircuits;
  return opts.redisUrl ? redisCircuits(opts.redisUrl, local, opts.log) : local;
}
