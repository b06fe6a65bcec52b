// A small pool of plain `pg` connections for the proxy's hottest single statements (the
// transactional accept commit), beside MikroORM's own pool. Statements run here are named, so
// each connection prepares them once: PostgreSQL parses, analyses and plans them once instead
// of per call, and the API sends typed parameters instead of MikroORM's client-side formatting
// of every value into the query text (a 1 KiB body became 3 KB of escaped SQL). Both costs fell
// on the 2 vCPUs the call's Temporal start needs at the same moment (docs/PROXY.md).
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { closeWithOrm } from './orm.ts';

export type StatementPool = {
  /** Runs a named statement; its text must be the same every time for the same name. */
  run(name: string, sql: string, params: unknown[]): Promise<void>;
  /** The same, answering the statement's rows (`pg`'s types: int8 as a string, bytea as a Buffer). */
  rows(name: string, sql: string, params: unknown[]): Promise<Array<Record<string, unknown>>>;
};

/** `?` placeholders (the ORM's style) numbered as `$1, $2, …` (from `first`) for a prepared statement. */
export function numbered(sql: string, first = 1): string {
  let n = first - 1;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/**
 * A pool on the ORM's database, closed with the ORM; built once where a process is wired
 * (api/proxy/pipeline-parts.ts for the accept commit, the invocation activities for their load and
 * completion).
 */
export function createStatementPool(orm: MikroORM, applicationName = 'gateway-accept'): StatementPool {
  const connections = new pg.Pool({
    connectionString: String(orm.config.get('clientUrl')),
    max: 10,
    idleTimeoutMillis: 30_000,
    application_name: applicationName,
  });
  // A connection that breaks while idle is dropped by the pool; its error must not crash the process.
  connections.on('error', () => undefined);
  closeWithOrm(orm, () => connections.end().catch(() => undefined));
  return {
    async run(name, sql, params) {
      await connections.query({ name, text: sql, values: params });
    },
    async rows(name, sql, params) {
      return (await connections.query({ name, text: sql, values: params })).rows;
    },
  };
}
