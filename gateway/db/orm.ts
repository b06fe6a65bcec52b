// One MikroORM instance per process; request handlers and activities fork its EntityManager.
import { exitOnDatabaseProblem, gatewaySchemaProblem } from '../../lib/database-check.ts';
import { MikroORM } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { gatewayEntities } from './entities.ts';
import { gatewayMigrations } from './migrations/index.ts';

export async function openOrm(
  databaseUrl: string,
  opts: { poolMax?: number; poolMin?: number } = {},
): Promise<MikroORM> {
  const max = opts.poolMax ?? 10;
  return MikroORM.init({
    clientUrl: databaseUrl,
    entities: gatewayEntities,
    extensions: [Migrator],
    // Migrations are the committed files, listed explicitly: no schema sync, no file globbing.
    // Each runs in a transaction of its own (allOrNothing off), so one that must run outside any
    // (an index built concurrently, Migration20261206180000_concurrent_indexes) can: inside one
    // transaction around them all it would wait for that very transaction to end.
    migrations: {
      migrationsList: gatewayMigrations,
      transactional: true,
      allOrNothing: false,
      snapshot: false,
      silent: true,
    },
    // A few connections stay open when idle: after a quiet spell the next calls would otherwise
    // each pay a connection set-up (TCP, startup, auth) on their latency path.
    pool: { min: Math.min(opts.poolMin ?? 2, max), max },
    debug: false,
    discovery: { warnWhenNoEntities: false },
  });
}

/**
 * The gateway's database as a door holds it: opened at start and handed to the domain's
 * functions (gateway/), which alone query it; a door never does.
 */
export type GatewayDb = MikroORM;

/** One statement (`?` placeholders) on the ORM's pool, its rows as plain objects. */
export function queryRows(orm: MikroORM): (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>> {
  return (sql, params) => orm.em.getConnection().execute(sql, params);
}

/** Whether the database answers a statement now (the API's readiness). */
export function databaseAnswers(db: GatewayDb): Promise<boolean> {
  return db.em
    .getConnection()
    .execute('select 1')
    .then(
      () => true,
      () => false,
    );
}

/**
 * Ties something of the ORM's own (a connection or pool beside its pool, the change feed) to the
 * ORM's life: closing the ORM (shutdown, a test's replica) closes it first, instead of leaving
 * it reconnecting to a database nobody uses any more. The last one tied is closed first.
 */
export function closeWithOrm(orm: MikroORM, close: () => Promise<unknown>): void {
  const closeOrm = orm.close.bind(orm);
  orm.close = async (force?: boolean) => {
    await close();
    return closeOrm(force);
  };
}

/**
 * For the API and the workers, which never migrate: exits in one line unless the database
 * exists and carries every committed migration, before MikroORM would create it empty.
 */
export async function requireMigratedDatabase(processName: string, databaseUrl: string): Promise<void> {
  const expected = gatewayMigrations.map((m) => m.name);
  const problem = await gatewaySchemaProblem('DATABASE_URL', databaseUrl, expected);
  if (problem) exitOnDatabaseProblem(processName, problem);
}

/** Applies every pending migration; safe to run from several processes (MikroORM locks its table). */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}
