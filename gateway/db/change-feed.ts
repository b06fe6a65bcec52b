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
// and writers; a test replica has its own, like a separate process would. The parts: the
// connection and its lease (feed-connection.ts, feed-lease.ts) and the writers'
// acknowledgements (feed-acks.ts); this file puts them together with the listeners and `sync`.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { closeWithOrm } from './orm.ts';
import { openFeedConnection, type FeedConnection } from './feed-connection.ts';
import { createFeedAcks } from './feed-acks.ts';

/** The channel every notification of the feed goes on (the migrations' triggers name it too). */
export const CHANGE_FEED_CHANNEL = 'gateway_cache';
/**
 * The prefix of a key that tells the replicas something other than a change of cached data (a
 * process asking for a payment channel another holds): its listeners get it, the generation
 * does not move (a read racing it may still be cached).
 */
export const FEED_NOTICE = 'notice:';

type ChangeListener = (key: string) => void;

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

export function createChangeFeed(connectionString: string, opts: ChangeFeedOptions = {}): ChangeFeed {
  const leaseMs = opts.leaseMs ?? 4_000;
  const syncTimeoutMs = opts.syncTimeoutMs ?? 500;
  const replicaId = `rep_${randomUUID()}`;
  const listeners = createListeners();
  const connection = openFeedConnection({
    connectionString,
    channel: CHANGE_FEED_CHANNEL,
    replicaId,
    heartbeatMs: opts.heartbeatMs ?? 1_000,
    heartbeatTimeoutMs: opts.heartbeatTimeoutMs ?? 2_000,
    leaseMs,
    onNotification: (c, payload) => {
      const acknowledge = (ack: string) =>
        void c.query('select pg_notify($1, $2)', [CHANGE_FEED_CHANNEL, ack]).catch(() => connection.drop(c));
      if (!acks.receive(payload, acknowledge)) listeners.emit(payload);
    },
    onReset: () => listeners.emit('*'),
  });
  const acks = createFeedAcks({ channel: CHANGE_FEED_CHANNEL, replicaId, leaseMs, connection });

  return {
    live: connection.live,
    generation: listeners.generation,
    subscribe: listeners.subscribe,
    invalidate: listeners.emit,
    publish: acks.publish,
    sync: sharedBarrier(connection, syncTimeoutMs),
    close: connection.close,
  };
}

/** The caches' listeners, and the generation every emitted key (or loss) moves on. */
function createListeners() {
  const listeners: ChangeListener[] = [];
  let gen = 0;
  return {
    emit(key: string): void {
      if (!key.startsWith(FEED_NOTICE)) gen += 1;
      for (const listener of listeners) listener(key);
    },
    generation: () => gen,
    subscribe: (listener: ChangeListener) => void listeners.push(listener),
  };
}

/** ChangeFeed.sync: at most one round trip in flight; callers arriving meanwhile share the next. */
function sharedBarrier(connection: FeedConnection, timeoutMs: number): () => Promise<void> {
  let inflight: Promise<void> | null = null;
  let queued: Promise<void> | null = null;
  const barrier = (): Promise<void> => {
    const c = connection.subscribed();
    if (!c) return Promise.resolve();
    if (!inflight) {
      inflight = connection.bounded(c, c.query('select 1'), timeoutMs).then(() => {
        inflight = null;
      });
      return inflight;
    }
    queued ??= inflight.then(() => {
      queued = null;
      return barrier();
    });
    return queued;
  };
  return barrier;
}
