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
// - Shared by every process: with REDIS_URL a key whose TTL is the open period; without it a
//   row of the gateway's database (`open_circuits`), its deadline on the database's clock. So
//   every API learns what any worker's or replica's breaker knows. Reads are cached for a
//   second per circuit; a store that cannot be reached fails open (not refused here; the
//   breaker still fails the call fast), like the rate limiter: its outage must not refuse
//   every paid call.
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Logger } from '../../lib/log.ts';
import { redisClient } from '../policy/redis.ts';
import { upstreamTarget } from './targets.ts';

export type OpenCircuits = {
  /** A breaker of `key` opened: calls fail fast for `forMs`, then one probe is let through. */
  opened(key: string, forMs: number): void;
  /** Milliseconds until the circuit of `key` may half-open; 0 when it is not known to be open. */
  openFor(key: string): Promise<number>;
};

/** The circuit of a tenant's calls to an upstream: its origin (scheme, host and port). */
export function circuitKey(url: string, tenantId = ''): string {
  return `${tenantId}\0${upstreamTarget(url).origin}`;
}

/** At most this many circuits remembered per table; the same bound as the breakers themselves. */
const MAX_ENTRIES = 10_000;
/** How long a shared read (open or not) is trusted before it is asked again. */
const SHARED_READ_CACHE_MS = 1_000;

/** A table of open circuits in this process's memory (until when each stays open, epoch ms). */
export function createMemoryCircuits(): OpenCircuits {
  const until = new LRUCache<string, number>({ max: MAX_ENTRIES });
  return {
    opened(key, forMs) {
      until.set(key, Math.max(until.get(key) ?? 0, Date.now() + forMs));
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

/** Where every process's announcements meet: Redis or the gateway's database. */
type SharedStore = {
  /** Records `key` open for `forMs` from now (a later deadline is never shortened). */
  announce(key: string, forMs: number): Promise<unknown>;
  /** Milliseconds `key` stays open, 0 when it is not. */
  remaining(key: string): Promise<number>;
};

/** Tenant ids and origins are the tenants' own text: hashed into fixed-size keys. */
const hashed = (key: string) => createHash('sha256').update(key).digest('hex');

function redisStore(url: string, log?: Logger): SharedStore {
  // Created on first use: a process whose breakers never open never connects for them.
  const redis = () => redisClient(url, log);
  const redisKey = (key: string) => `gw:circuit:${hashed(key)}`;
  return {
    // Every breaker has the same period, so a later opening never shortens an earlier one.
    announce: (key, forMs) =>
      redis().set(redisKey(key), String(Date.now() + forMs), 'PX', Math.max(1, Math.ceil(forMs))),
    remaining: async (key) => Math.max(0, await redis().pttl(redisKey(key))),
  };
}

/** Runs one statement on the gateway's database (`?` placeholders) and gives its rows. */
export type QueryRows = (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;

// One statement per opening; rows a day past their deadline go with it (openings are rare).
const ANNOUNCE = `with gone as (delete from open_circuits where open_until < now() - interval '1 day')
insert into open_circuits (circuit, open_until) values (?, now() + ? * interval '1 millisecond')
on conflict (circuit) do update set open_until = greatest(open_circuits.open_until, excluded.open_until)`;
const REMAINING = `select greatest(0, extract(epoch from open_until - now()) * 1000)::float8 as ms
from open_circuits where circuit = ?`;

function databaseStore(query: QueryRows): SharedStore {
  return {
    announce: (key, forMs) => query(ANNOUNCE, [hashed(key), Math.ceil(forMs)]),
    remaining: async (key) => Number((await query(REMAINING, [hashed(key)]))[0]?.ms ?? 0),
  };
}

function sharedCircuits(store: SharedStore, local: OpenCircuits, log?: Logger): OpenCircuits {
  const reads = new LRUCache<string, { at: number; until: Promise<number> }>({ max: MAX_ENTRIES });
  let lastWarn = 0;
  const failOpen = (err: Error): number => {
    if (Date.now() - lastWarn > 30_000) {
      lastWarn = Date.now();
      log?.warn({ err: err.message }, 'open circuits unavailable; paid calls not checked against them');
    }
    return 0;
  };
  return {
    opened(key, forMs) {
      local.opened(key, forMs);
      reads.delete(key);
      store.announce(key, forMs).catch(failOpen);
    },
    async openFor(key) {
      const own = await local.openFor(key);
      if (own > 0) return own;
      let read = reads.get(key);
      if (!read || Date.now() - read.at > SHARED_READ_CACHE_MS) {
        const at = Date.now();
        read = { at, until: store.remaining(key).then((ms) => (ms > 0 ? at + ms : 0), failOpen) };
        reads.set(key, read);
      }
      return Math.max(0, (await read.until) - Date.now());
    },
  };
}

/**
 * The open circuits a process's breakers publish to and its payment gate reads: this process's
 * table (or `local`), and what every process shares: Redis when `redisUrl` is set, else the
 * gateway's database through `query` (absent: this process alone, as in a test of one app).
 */
export function createOpenCircuits(
  opts: { redisUrl?: string; query?: QueryRows; log?: Logger; local?: OpenCircuits } = {},
): OpenCircuits {
  const local = opts.local ?? processCircuits;
  if (opts.redisUrl) return sharedCircuits(redisStore(opts.redisUrl, opts.log), local, opts.log);
  if (opts.query) return sharedCircuits(databaseStore(opts.query), local, opts.log);
  return local;
}
