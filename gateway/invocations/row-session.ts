// The connection streaming rows are written on (gateway/invocations/stream-records.ts), one per API process,
// and the process's identity for them: an owner id, held as a PostgreSQL session advisory
// lock on that same connection. Every streaming row carries its owner; while the owner's lock
// is held, its `running` rows are live calls, and once it is free (the process died, or its
// connection did) the stale-stream sweep (stale-streams.ts) fails them `gateway_lost`. Rows
// are only ever written on the connection that holds the lock, so a row cannot name an owner
// whose lock was never taken.
//
// A plain pg client with parameterised statements, not the ORM's pool: the rows are the
// proxy's hottest writes, and MikroORM's query formatting (parameters inlined client-side,
// dates formatted) cost more CPU than the statement itself. Commits are synchronous, as the
// server's default: the rows are the call's record (and carry its receipt), so a PostgreSQL
// crash must not lose them; nobody waits for them, and group commit pays one WAL flush per
// batch, so the flush costs the calls nothing.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/** The advisory lock class of owner locks: key (OWNER_LOCK_CLASS, hashtext(owner)). */
export const OWNER_LOCK_CLASS = 0x67_77_72_6f; // "gwro"

/** A statement; one with a `name` is prepared once per connection (its text must not vary). */
export type Statement = { name?: string; sql: string; params: unknown[] };

export type RowSession = {
  /** This process's owner id (stable for the life of the session object). */
  readonly owner: string;
  /**
   * Runs one statement on the owning connection, (re)connecting and taking the lock first;
   * the statement is built once the lock is held, for the owner that holds it. Connected, the
   * statement is handed to the pg client before this returns, which writes it at once when idle
   * (else after the statement in flight: one connection, one statement at a time); once written
   * it commits even if this process dies (PostgreSQL has it whole and commits at its Sync,
   * before it writes anything back).
   */
  run<R = unknown>(build: (owner: string) => Statement): Promise<R[]>;
  close(): Promise<void>;
};

const LOCK_ATTEMPTS = 20;

/** `lock: false`: a plain connection for rows that need no live owner (completions). */
export function createRowSession(connectionString: string, opts: { lock?: boolean } = {}): RowSession {
  const lock = opts.lock ?? true;
  let owner = `gw_${randomUUID()}`;
  let everLocked = false;
  let client: pg.Client | null = null;
  let ready: Promise<pg.Client> | null = null;
  /** The client, once connected and locked (until dropped). */
  let connected: pg.Client | null = null;
  let closed = false;

  const drop = (c: pg.Client) => {
    if (connected === c) connected = null;
    if (client !== c) return;
    client = null;
    ready = null;
    c.end().catch(() => undefined);
  };

  async function open(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString, keepAlive: true, application_name: 'gateway-stream-rows' });
    client = c;
    c.on('error', () => drop(c));
    c.on('end', () => drop(c));
    try {
      await c.connect();
      // The socket must not keep a process alive that is otherwise done.
      (c as unknown as { connection?: { stream?: { unref?: () => void } } }).connection?.stream?.unref?.();
      // The lock may be held for a moment by a sweep testing it, or (first connect only) by a
      // process whose random id hashes alike: a fresh id then, the same one after that (rows
      // already carry it).
      for (let attempt = 0; lock; attempt++) {
        const { rows } = await c.query<{ locked: boolean }>('select pg_try_advisory_lock($1, hashtext($2)) as locked', [
          OWNER_LOCK_CLASS,
          owner,
        ]);
        if (rows[0].locked) break;
        if (!everLocked) owner = `gw_${randomUUID()}`;
        else if (attempt >= LOCK_ATTEMPTS) throw new Error('owner lock unavailable');
        else await sleep(50);
      }
      everLocked = true;
      if (client === c) connected = c;
      return c;
    } catch (err) {
      drop(c);
      throw err;
    }
  }

  return {
    get owner() {
      return owner;
    },
    async run<R>(build: (owner: string) => Statement): Promise<R[]> {
      if (closed) throw new Error('row session closed');
      // Connected: the statement is written before this returns, with no promise hop first (a
      // caller may then hold the event loop for a moment while PostgreSQL runs it).
      const c = connected ?? (await (ready ??= open()));
      const { name, sql, params } = build(owner);
      try {
        return (await c.query({ name, text: sql, values: params })).rows as R[];
      } catch (err) {
        // A statement error leaves the session usable; a broken connection is replaced.
        if ((err as { code?: unknown }).code === undefined) drop(c);
        throw err;
      }
    },
    async close() {
      closed = true;
      if (client) {
        const c = client;
        client = null;
        connected = null;
        ready = null;
        await c.end().catch(() => undefined);
      }
    },
  };
}
