// The change feed's one PostgreSQL connection: LISTEN on the channel, then the replica's lease,
// renewed by a heartbeat, and reconnection with backoff. Any failure (an error, an end, a
// statement that does not come back in time) drops the connection at once, so the feed stops
// answering from memory before it could have missed a notification (change-feed.ts).
import pg from 'pg';
import { FORGET_OLD_REPLICAS, LEASE_MARGIN_MS, RELEASE_LEASE, RENEW_LEASE } from './feed-lease.ts';

export type FeedConnectionOptions = {
  connectionString: string;
  channel: string;
  replicaId: string;
  heartbeatMs: number;
  heartbeatTimeoutMs: number;
  leaseMs: number;
  /** A notification on the channel, received on `c`. */
  onNotification(c: pg.Client, payload: string): void;
  /** Subscribed afresh or lost: anything cached before may have missed a notification. */
  onReset(): void;
};

export type FeedConnection = {
  /** True while subscribed and within this process's end of the lease. */
  live(): boolean;
  /** The connection while subscribed; null otherwise. */
  subscribed(): pg.Client | null;
  /** Drops `c` if it is still the current connection, and reconnects after a backoff. */
  drop(c: pg.Client): void;
  /** `query` on `c`, resolving false (and dropping `c`) if it fails or takes longer than `timeoutMs`. */
  bounded(c: pg.Client, query: Promise<unknown>, timeoutMs: number): Promise<boolean>;
  /** One statement on the subscribed connection if there is one, else on a connection of its own. */
  run<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R[]>;
  /** Releases the lease and closes for good. */
  close(): Promise<void>;
};

/** The statement each connection ran last, for the next to follow. */
const lastStatement = new WeakMap<pg.Client, Promise<unknown>>();

/**
 * `sql` on `c` once its previous statement is done: a heartbeat can come due while the last one
 * is still out (a busy server), and a publication or the lease's release can meet either. pg
 * queues such statements itself but warns that it will stop (deprecated in pg 8.16); the order
 * and the timeouts are the same.
 */
function inTurn<R extends pg.QueryResultRow = pg.QueryResultRow>(
  c: pg.Client,
  sql: string,
  params?: unknown[],
): Promise<pg.QueryResult<R>> {
  const next = (lastStatement.get(c) ?? Promise.resolve()).then(() => c.query<R>(sql, params));
  lastStatement.set(
    c,
    next.catch(() => undefined),
  );
  return next;
}

export function openFeedConnection(opts: FeedConnectionOptions): FeedConnection {
  const { connectionString, channel, replicaId, leaseMs } = opts;
  let client: pg.Client | null = null;
  let subscribed = false;
  let leasedUntil = 0; // performance.now() at which this process stops trusting its lease
  let closed = false;
  let retryMs = 100;
  let heartbeat: NodeJS.Timeout | null = null;

  function lost(failed: pg.Client): void {
    if (client !== failed) return;
    client = null;
    subscribed = false;
    leasedUntil = 0;
    if (heartbeat) clearInterval(heartbeat);
    heartbeat = null;
    opts.onReset();
    failed.removeAllListeners('notification');
    failed.end().catch(() => undefined);
    if (closed) return;
    const wait = retryMs;
    retryMs = Math.min(retryMs * 2, 5_000);
    setTimeout(connect, wait).unref();
  }

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

  /** Renews the lease on `c`; a renewal that fails or does not come back in time drops the connection. */
  function renewLease(c: pg.Client): Promise<void> {
    const sentAt = performance.now();
    return bounded(c, inTurn(c, RENEW_LEASE, [replicaId, leaseMs]), opts.heartbeatTimeoutMs).then((ok) => {
      if (ok && client === c) leasedUntil = sentAt + leaseMs - LEASE_MARGIN_MS;
    });
  }

  function connect(): void {
    if (closed) return;
    const c = new pg.Client({ connectionString, keepAlive: true, application_name: 'gateway-cache-feed' });
    client = c;
    c.on('error', () => lost(c));
    c.on('end', () => lost(c));
    c.on('notification', (msg) => {
      if (msg.channel === channel) opts.onNotification(c, msg.payload ?? '*');
    });
    c.connect()
      .then(() => {
        // The socket must not keep a process alive that is otherwise done.
        (c as unknown as { connection?: { stream?: { unref?: () => void } } }).connection?.stream?.unref?.();
        return inTurn(c, `listen ${channel}`);
      })
      .then(() => inTurn(c, FORGET_OLD_REPLICAS))
      // Leased only after LISTEN: a writer that does not see this lease committed before it was
      // taken, and its notification is delivered here before the lease's statement returns.
      .then(() => renewLease(c))
      .then(() => {
        if (client !== c || leasedUntil === 0) return;
        opts.onReset();
        subscribed = true;
        retryMs = 100;
        heartbeat = setInterval(() => void renewLease(c), opts.heartbeatMs);
        heartbeat.unref();
      })
      .catch(() => lost(c));
  }

  async function run<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R[]> {
    if (client && subscribed) return (await inTurn<R>(client, sql, params)).rows;
    const own = new pg.Client({ connectionString, application_name: 'gateway-cache-publish' });
    await own.connect();
    try {
      return (await own.query<R>(sql, params)).rows;
    } finally {
      await own.end().catch(() => undefined);
    }
  }

  connect();

  return {
    live: () => subscribed && performance.now() < leasedUntil,
    subscribed: () => (subscribed ? client : null),
    drop: lost,
    bounded,
    run,
    async close() {
      closed = true;
      const c = client;
      if (c) {
        await bounded(c, inTurn(c, RELEASE_LEASE, [replicaId]), 1_000);
        lost(c);
      }
    },
  };
}
