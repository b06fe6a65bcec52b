// The PostgreSQL backends serving one database, for a benchmark's CPU table: the server may be
// shared with other work, so only the connections to the bench database are counted (the
// probe's own connection left out).
import pg from 'pg';

export type DatabaseBackends = { pids: () => Promise<number[]>; end: () => Promise<void> };

/** Connects a probe to `databaseUrl`; `pids()` lists the other backends on that database now. */
export async function databaseBackends(databaseUrl: string): Promise<DatabaseBackends> {
  const databaseName = new URL(databaseUrl).pathname.slice(1);
  const probe = new pg.Client({ connectionString: databaseUrl });
  await probe.connect();
  return {
    pids: async () =>
      (
        await probe.query<{ pid: number }>(
          'select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
          [databaseName],
        )
      ).rows.map((r) => r.pid),
    end: () => probe.end(),
  };
}
