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
   * Resolves once every notification committed before the call has reached this feed: a
   * round trip on the LISTEN connection (PostgreSQL sends pending notifications before it
   * reports the query done). A writer awaits it before answering, so by then PostgreSQL has
   * dispatched its change to every listening replica.
   */
  sync(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
};

export type ChangeFeedOptions = { heartbeatMs?: number; heartbeatTimeoutMs?: number };

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

  // A connection that died silently (no FIN, no error) is found by a query that does not
  // come back in time: the feed goes deaf-and-says-so instead of deaf-and-trusted.
  function beat(c: pg.Client): void {
    let answered = false;
    const timer = setTimeout(() => {
      if (!answered) lost(c);
    }, heartbeatTimeoutMs);
    timer.unref();
    c.query('select 1').then(
      () => {
        answered = true;
        clearTimeout(timer);
      },
      () => lost(c),
    );
  }

  connect();

  return {
    live: () => subscribed,
    generation: () => gen,
    subscribe: (listener) => void listeners.push(listener),
    invalidate: emit,
    async sync(timeoutMs = 1_000) {
      const c = client;
      if (!c || !subscribed) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        c.query('select 1').catch(() => undefined),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    },
    async close() {
      closed = true;
      const c = client;
      if (c) {
        lost(c);
      }
    },
  };
}
