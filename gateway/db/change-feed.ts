// The change feed behind the API's per-process caches (agents, tenant policies): one
// dedicated PostgreSQL connection LISTENing on `gateway_cache`, which triggers on the cached
// tables notify in the writing transaction (Migration20261122140000_cache_invalidation).
//
// Correctness rests on three rules the caches and the writers follow:
// - A cache may answer only while the feed is `live()`: subscribed, and holding its lease in
//   `gateway_cache_replicas` (Migration20261124110000_cache_replicas), renewed by the
//   heartbeat on this connection. Until LISTEN and the first lease have succeeded, and from
//   the moment the connection is lost (an error, an end, or a heartbeat that does not come
//   back) or the lease runs out, every call reads the database: a notification missed while
//   deaf cannot leave a stale entry behind, since losing the subscription also empties every
//   cache (the `*` key).
// - A read that raced a notification must not be cached: `generation()` goes up with every
//   notification and every loss, and a cache stores what it read only if the generation is
//   the one it saw before reading.
// - A writer (an agent or policy change made through the API) calls `publish()` after its
//   commit: it sends a sync token on the channel and waits until every replica holding a lease
//   has acknowledged it, which a replica does once it has received the token, i.e. once it has
//   applied every notification committed before it (PostgreSQL delivers them in commit order).
//   A replica that does not acknowledge is waited for until its lease has run out, and by then
//   it no longer answers from memory (its own clock ends its lease before the database's).
//   So by the writer's answer the change is in force on every replica, and a proxied call
//   makes no round trip for it. A change made in SQL behind the API's back is applied by each
//   replica as its notification arrives; `sync()` (GATE_CACHE_FRESHNESS=strict) also covers
//   those, at one round trip per call.
// One feed per API process, opened where it is wired (api/main.ts) and handed to the caches
// and writers; a test replica has its own, like a separate process would.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { closeWithOrm } from './orm.ts';

export const CHANNEL = 'gateway_cache';

export type ChangeListener = (key: string) => void;

export type ChangeFeed = {
  /** True while subscribed and leased; only then may a cache answer without the database. */
  live(): boolean;
  /** Goes up on every notification (or local invalidation) and every loss of the subscription. */
  generation(): number;
  /** `key` is `agent:<id>`, `policy:<tenant>` or `*` (everything). */
  subscribe(listener: ChangeListener): void;
  /** This process's own write, applied at once (its notification follows). */
  invalidate(key: string): void;
  /**
   * After a committed write: resolves once every replica holding a lease has acknowledged
   * applying it, or its lease has run out (see above). Bounded by the longest lease.
   */
  publish(): Promise<void>;
  /**
   * Resolves once every notification committed before the call has been applied here: a
   * round trip on the LISTEN connection sent after the call (PostgreSQL sends pending
   * notifications before it reports a query done). Concurrent callers share one round trip
   * (the next one sent after they asked); one that does not come back within the timeout
   * counts as a lost subscription, so the caches stop answering (fail closed). Resolves at
   * once while not subscribed.
   */
  sync(): Promise<void>;
  close(): Promise<void>;
};

export type ChangeFeedOptions = {
  heartbeatMs?: number;
  heartbeatTimeoutMs?: number;
  syncTimeoutMs?: number;
  leaseMs?: number;
};

/** A feed on the ORM's database, closed with the ORM (before its pool). */
export function openChangeFeed(orm: MikroORM, opts: ChangeFeedOptions = {}): ChangeFeed {
  const feed = createChangeFeed(String(orm.config.get('clientUrl')), opts);
  closeWithOrm(orm, () => feed.close());
  return feed;
}

// A lease is taken for LEASE_MS of the database's clock from when its statement runs; this
// process counts it from when it sent the statement, less a margin for clock rates, so its own
// end of the lease always comes first.
const LEASE_MARGIN_MS = 500;

const RENEW_LEASE = `insert into gateway_cache_replicas (replica_id, lease_until) values ($1, clock_timestamp() + $2 * interval '1 millisecond')
  on conflict (replica_id) do update set lease_until = excluded.lease_until`;
// Replicas of processes long gone (their rows are never read once their lease has passed).
const FORGET_OLD_REPLICAS = `delete from gateway_cache_replicas where lease_until < clock_timestamp() - interval '1 hour'`;
const LEASED_REPLICAS = `select replica_id, ceil(extract(epoch from lease_until - clock_timestamp()) * 1000)::int as remaining_ms
  from gateway_cache_replicas where lease_until > clock_timestamp()`;

export function createChangeFeed(connectionString: string, opts: ChangeFeedOptions = {}): ChangeFeed {
  const heartbeatMs = opts.heartbeatMs ?? 1_000;
  const heartbeatTimeoutMs = opts.heartbeatTimeoutMs ?? 2_000;
  const syncTimeoutMs = opts.syncTimeoutMs ?? 500;
  const leaseMs = opts.leaseMs ?? 4_000;
  const replicaId = `rep_${randomUUID()}`;
  const listeners: ChangeListener[] = [];
  let subscribed = false;
  let leasedUntil = 0; // performance.now() at which this process stops trusting its lease
  let gen = 0;
  let closed = false;
  let client: pg.Client | null = null;
  let retryMs = 100;
  let heartbeat: NodeJS.Timeout | null = null;
  // publish(): acknowledgements awaited, by sync token, then by replica id.
  const awaiting = new Map<string, Map<string, () => void>>();

  const emit = (key: string) => {
    gen += 1;
    for (const listener of listeners) listener(key);
  };

  function lost(failed: pg.Client): void {
    if (client !== failed) return;
    client = null;
    subscribed = false;
    leasedUntil = 0;
    if (heartbeat) clearInterval(heartbeat);
    heartbeat = null;
    emit('*');
    failed.removeAllListeners('notification');
    failed.end().catch(() => undefined);
    if (closed) return;
    const wait = retryMs;
    retryMs = Math.min(retryMs * 2, 5_000);
    setTimeout(connect, wait).unref();
  }

  /** Renews the lease on `c`; a renewal that fails or does not come back in time drops the connection. */
  function renewLease(c: pg.Client): Promise<void> {
    const sentAt = performance.now();
    return bounded(c, c.query(RENEW_LEASE, [replicaId, leaseMs]), heartbeatTimeoutMs).then((ok) => {
      if (ok && client === c) leasedUntil = sentAt + leaseMs - LEASE_MARGIN_MS;
    });
  }

  function onNotification(c: pg.Client, payload: string): void {
    if (payload.startsWith('sync:')) {
      // Every notification committed before the token has been applied (they arrive in commit
      // order and are applied as they arrive): say so.
      c.query('select pg_notify($1, $2)', [CHANNEL, `ack:${payload.slice(5)}:${replicaId}`]).catch(() => lost(c));
      return;
    }
    if (payload.startsWith('ack:')) {
      const [, token, replica] = payload.split(':');
      awaiting.get(token)?.get(replica)?.();
      return;
    }
    emit(payload);
  }

  function connect(): void {
    if (closed) return;
    const c = new pg.Client({ connectionString, keepAlive: true, application_name: 'gateway-cache-feed' });
    client = c;
    c.on('error', () => lost(c));
    c.on('end', () => lost(c));
    c.on('notification', (msg) => {
      if (msg.channel === CHANNEL) onNotification(c, msg.payload ?? '*');
    });
    c.connect()
      .then(() => {
        // The socket must not keep a process alive that is otherwise done.
        (c as unknown as { connection?: { stream?: { unref?: () => void } } }).connection?.stream?.unref?.();
        return c.query(`listen ${CHANNEL}`);
      })
      .then(() => c.query(FORGET_OLD_REPLICAS))
      // Leased only after LISTEN: a writer that does not see this lease committed before it was
      // taken, and its notification is delivered here before the lease's statement returns.
      .then(() => renewLease(c))
      .then(() => {
        if (client !== c || leasedUntil === 0) return;
        // Anything cached before this point may have missed a notification.
        emit('*');
        subscribed = true;
        retryMs = 100;
        heartbeat = setInterval(() => void renewLease(c), heartbeatMs);
        heartbeat.unref();
      })
      .catch(() => lost(c));
  }

  /** `query` on `c`, resolving false (and dropping `c`) if it fails or takes longer than `timeoutMs`. */
  function bounded(c: pg.Client, query: Promise<unknown>, timeoutMs: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        lost(c);
        resolve(false);
      }, timeoutMs);
      timer.unref();
      query.then(
        () => {
          clearTimeout(timer);
          resolve(true);
        },
        () => {
          clearTimeout(timer);
          lost(c);
          resolve(false);
        },
      );
    });
  }

  // Barriers: at most one round trip in flight; callers arriving meanwhile share the next.
  let inflight: Promise<void> | null = null;
  let queued: Promise<void> | null = null;
  function barrier(): Promise<void> {
    const c = client;
    if (!c || !subscribed) return Promise.resolve();
    if (!inflight) {
      inflight = bounded(c, c.query('select 1'), syncTimeoutMs).then(() => {
        inflight = null;
      });
      return inflight;
    }
    queued ??= inflight.then(() => {
      queued = null;
      return barrier();
    });
    return queued;
  }

  /** One statement on the feed's connection if it is up, else on a connection of its own. */
  async function run<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R[]> {
    if (client && subscribed) return (await client.query<R>(sql, params)).rows;
    const own = new pg.Client({ connectionString, application_name: 'gateway-cache-publish' });
    await own.connect();
    try {
      return (await own.query<R>(sql, params)).rows;
    } finally {
      await own.end().catch(() => undefined);
    }
  }

  async function publish(): Promise<void> {
    const token = randomUUID();
    let replicas: Array<{ replica_id: string; remaining_ms: number }>;
    try {
      replicas = await run(LEASED_REPLICAS, []);
    } catch {
      // The write is committed; who holds a lease is unknown: every lease taken so far ends
      // within leaseMs, and one renewed after the commit applied the change first.
      await new Promise((r) => setTimeout(r, leaseMs + 50));
      return;
    }
    if (replicas.length === 0) return;
    const pending = new Map<string, () => void>();
    awaiting.set(token, pending);
    const waits = replicas.map(
      (r) =>
        new Promise<void>((resolve) => {
          // Not acknowledged (or the acknowledgement not heard here): by the lease's end it no
          // longer answers from memory unless it renewed, and a renewal applies the change first.
          const timer = setTimeout(resolve, Math.max(0, r.remaining_ms) + 50);
          pending.set(r.replica_id, () => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    try {
      // Not sent: nobody acknowledges, and each lease is waited out instead.
      await run('select pg_notify($1, $2)', [CHANNEL, `sync:${token}`]).catch(() => undefined);
      await Promise.all(waits);
    } finally {
      awaiting.delete(token);
    }
  }

  connect();

  return {
    live: () => subscribed && performance.now() < leasedUntil,
    generation: () => gen,
    subscribe: (listener) => void listeners.push(listener),
    invalidate: emit,
    publish,
    sync: () => barrier(),
    async close() {
      closed = true;
      const c = client;
      if (c) {
        // Writers need not wait for a replica that is gone.
        await bounded(c, c.query('delete from gateway_cache_replicas where replica_id = $1', [replicaId]), 1_000);
        lost(c);
      }
    },
  };
}
