// The change feed behind the API's per-process caches (agents, tenant policies): one
// dedicated PostgreSQL connection LISTENing on `gateway_cache`, which triggers on the cached
// tables notify in the writing transaction (Migration20261122140000_cache_invalidation).
//
// Correctness rests on two rules the caches follow:
// - A cache may answer only while the feed is `live()` (subscribed). Until LISTEN has
//   succeeded, and from the moment the connection is lost (an error, an end, or a heartbeat
//   that does not come back) until it is re-established, every call reads the database: a
//   notification missed while deaf cannot leave a stale entry behind, since losing the
//   subscription also empties every cache (the `*` key).
// - A read that raced a notification must not be cached: `generation()` goes up with every
//   notification and every loss, and a cache stores what it read only if the generation is
//   the one it saw before reading.
// One feed per MikroORM instance (one per process in production; a test replica with its
// own ORM has its own feed, like a separate process would).
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';

export const CHANNEL = 'gateway_cache';

export type ChangeListener = (key: string) => void;

export type ChangeFeed = {
  /** True while subscribed; only then may a cache answer without the database. */
  live(): boolean;
  /** Goes up on every notification (or local invalidation) and every loss of the subscription. */
  generation(): number;
  /** `key` is `agent:<id>`, `policy:<tenant>` or `*` (everything). */
  subscribe(listener: ChangeListener): void;
  /** This process's own write, applied at once (its notification follows). */
  invalidate(key: string): void;
  /**
   * Resolves once every notification committed before the call has been applied here: a
   * round trip on the LISTEN connection sent after the call (PostgreSQL sends pending
   * notifications before it reports a query done). The proxy gate awaits it before it reads
   * its caches, which makes a change committed before a call arrives in force for that call
   * on every replica. Concurrent callers share one round trip (the next one sent after they
   * asked); one that does not come back within the timeout counts as a lost subscription, so
   * the caches stop answering (fail closed). Resolves at once while not subscribed.
   */
  sync(): Promise<void>;
  close(): Promise<void>;
};

export type ChangeFeedOptions = { heartbeatMs?: number; heartbeatTimeoutMs?: number; syncTimeoutMs?: number };

const feeds = new WeakMap<MikroORM, ChangeFeed>();

export function changeFeedFor(orm: MikroORM): ChangeFeed {
  let feed = feeds.get(orm);
  if (!feed) {
    const created = createChangeFeed(String(orm.config.get('clientUrl')));
    feeds.set(orm, (feed = created));
    // The feed lives as long as its ORM: closing the ORM (shutdown, a test's replica) closes
    // it too, instead of leaving it reconnecting to a database nobody uses any more.
    const close = orm.close.bind(orm);
    orm.close = async (force?: boolean) => {
      await created.close();
      return close(force);
    };
  }
  return feed;
}

export function createChangeFeed(connectionString: string, opts: ChangeFeedOptions = {}): ChangeFeed {
  const heartbeatMs = opts.heartbeatMs ?? 2_000;
  const heartbeatTimeoutMs = opts.heartbeatTimeoutMs ?? 2_000;
  const syncTimeoutMs = opts.syncTimeoutMs ?? 500;
  const listeners: ChangeListener[] = [];
  let subscribed = false;
  let gen = 0;
  let closed = false;
  let client: pg.Client | null = null;
  let retryMs = 100;
  let heartbeat: NodeJS.Timeout | null = null;

  const emit = (key: string) => {
    gen += 1;
    for (const listener of listeners) listener(key);
  };

  function lost(failed: pg.Client): void {
    if (client !== failed) return;
    client = null;
    subscribed = false;
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

  function connect(): void {
    if (closed) return;
    const c = new pg.Client({ connectionString, keepAlive: true, application_name: 'gateway-cache-feed' });
    client = c;
    c.on('error', () => lost(c));
    c.on('end', () => lost(c));
    c.on('notification', (msg) => {
      if (msg.channel === CHANNEL) emit(msg.payload ?? '*');
    });
    c.connect()
      .then(() => {
        // The socket must not keep a process alive that is otherwise done.
        (c as unknown as { connection?: { stream?: { unref?: () => void } } }).connection?.stream?.unref?.();
        return c.query(`listen ${CHANNEL}`);
      })
      .then(() => {
        if (client !== c) return;
        // Anything cached before this point may have missed a notification.
        emit('*');
        subscribed = true;
        retryMs = 100;
        heartbeat = setInterval(() => beat(c), heartbeatMs);
        heartbeat.unref();
      })
      .catch(() => lost(c));
  }

  /** A `select 1` on the LISTEN connection; a connection that does not answer in time is dropped. */
  function roundTrip(c: pg.Client, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        lost(c);
        resolve();
      }, timeoutMs);
      timer.unref();
      c.query('select 1').then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        () => {
          clearTimeout(timer);
          lost(c);
          resolve();
        },
      );
    });
  }

  // A connection that died silently (no FIN, no error) is found by a heartbeat that does not
  // come back in time: the feed goes deaf-and-says-so instead of deaf-and-trusted.
  function beat(c: pg.Client): void {
    void roundTrip(c, heartbeatTimeoutMs);
  }

  // Barriers: at most one round trip in flight; callers arriving meanwhile share the next.
  let inflight: Promise<void> | null = null;
  let queued: Promise<void> | null = null;
  function barrier(): Promise<void> {
    const c = client;
    if (!c || !subscribed) return Promise.resolve();
    if (!inflight) {
      inflight = roundTrip(c, syncTimeoutMs).finally(() => {
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

  connect();

  return {
    live: () => subscribed,
    generation: () => gen,
    subscribe: (listener) => void listeners.push(listener),
    invalidate: emit,
    sync: () => barrier(),
    async close() {
      closed = true;
      const c = client;
      if (c) {
        lost(c);
      }
    },
  };
}
