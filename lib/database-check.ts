// Start-up checks of a process's PostgreSQL database, turned into one line that names the
// variable and the fix: a wrong URL, a database nobody created, one that was never migrated.
// Without them the API and the workers would start (MikroORM even creates an empty database on
// first connect) and then fail every call; the facilitator's processes would print a stack trace.
import pg from 'pg';
import { exitWithProblems } from './config.ts';

/** `transient`: the database may answer on a later start (unreachable); otherwise the setup is wrong. */
export type DatabaseProblem = { line: string; transient: boolean };

/** host:port/database of a connection URL, never its user or password. */
function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    // An unescaped '/' in a password ends the authority early and leaves the rest of the
    // password, up to its '@', in the path: name nothing then.
    if (u.pathname.includes('@')) return 'the configured database';
    return `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return 'the configured database';
  }
}

/** One line for a failed connection or query at start. */
export function databaseProblem(variable: string, url: string, err: unknown): DatabaseProblem {
  const e = err as { code?: string; message?: string };
  const where = describeDatabase(url);
  if (e.code === '3D000')
    return {
      line: `${variable}: the database ${where} does not exist; npm run migrate (with ${variable} set) creates and migrates it`,
      transient: false,
    };
  const reason = (e.message || e.code || String(err)).split('\n')[0];
  // Class 28: invalid authorization (a wrong user or password) is the setup's, not the network's.
  return { line: `${variable}: cannot use the database ${where} (${reason})`, transient: !e.code?.startsWith('28') };
}

/**
 * Ends a process that met `problem` before starting anything: a wrong setup as a configuration
 * problem (exit 2), an unreachable database as a failed start (exit 1), one line either way.
 */
export function exitOnDatabaseProblem(processName: string, problem: DatabaseProblem): never {
  if (!problem.transient) exitWithProblems(processName, [problem.line]);
  process.stderr.write(`${processName}: ${problem.line}; nothing started\n`);
  process.exit(1);
}

/**
 * Whether the database exists and carries every migration in `expected` (their names, in
 * order), read with a plain connection so nothing is created on the way. Null when all is well.
 */
export async function gatewaySchemaProblem(
  variable: string,
  url: string,
  expected: string[],
): Promise<DatabaseProblem | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const applied = await client
      .query<{ name: string }>('select name from mikro_orm_migrations')
      // MikroORM compares names without a .js/.ts suffix (older releases recorded one).
      .then((r) => new Set(r.rows.map((row) => row.name.replace(/\.[jt]s$/, ''))))
      .catch((err: { code?: string }) => {
        if (err.code === '42P01') return new Set<string>(); // never migrated
        throw err;
      });
    const pending = expected.filter((name) => !applied.has(name));
    if (pending.length === 0) return null;
    return {
      line: `${variable}: the database ${describeDatabase(url)} lacks ${pending.length} of ${expected.length} migrations (first: ${pending[0]}); run npm run migrate with ${variable} set`,
      transient: false,
    };
  } catch (err) {
    return databaseProblem(variable, url, err);
  } finally {
    await client.end().catch(() => undefined);
  }
}
