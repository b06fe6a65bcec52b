// Start-up checks of a process's PostgreSQL database, turned into one line that names the
// variable and the fix: a wrong URL, a database nobody created, one that was never migrated.
// Without them the API and the workers would start (MikroORM even creates an empty database on
// first connect) and then fail every call; the facilitator's processes would print a stack trace.
import pg from 'pg';

/** host:port/database of a connection URL, never its user or password. */
export function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return 'the configured database';
  }
}

/** One line for a failed connection or query at start. */
export function databaseProblem(variable: string, url: string, err: unknown): string {
  const e = err as { code?: string; message?: string };
  const where = describeDatabase(url);
  if (e.code === '3D000')
    return `${variable}: the database ${where} does not exist; npm run migrate (with ${variable} set) creates and migrates it`;
  const reason = (e.message || e.code || String(err)).split('\n')[0];
  return `${variable}: cannot use the database ${where} (${reason})`;
}

/**
 * Whether the database exists and carries every migration in `expected` (their names, in
 * order), read with a plain connection so nothing is created on the way. Null when all is well.
 */
export async function gatewaySchemaProblem(variable: string, url: string, expected: string[]): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const applied = await client
      .query<{ name: string }>('select name from mikro_orm_migrations')
      .then((r) => new Set(r.rows.map((row) => row.name)))
      .catch((err: { code?: string }) => {
        if (err.code === '42P01') return new Set<string>(); // never migrated
        throw err;
      });
    const pending = expected.filter((name) => !applied.has(name));
    if (pending.length === 0) return null;
    return `${variable}: the database ${describeDatabase(url)} lacks ${pending.length} of ${expected.length} migrations (first: ${pending[0]}); run npm run migrate with ${variable} set`;
  } catch (err) {
    return databaseProblem(variable, url, err);
  } finally {
    await client.end().catch(() => undefined);
  }
}
