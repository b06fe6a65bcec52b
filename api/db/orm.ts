// One MikroORM instance per process; request handlers and activities fork its EntityManager.
import { MikroORM } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { gatewayEntities } from './entities.ts';
import { gatewayMigrations } from './migrations/index.ts';

export type Orm = MikroORM;

export async function openOrm(databaseUrl: string, opts: { poolMax?: number } = {}): Promise<MikroORM> {
  return MikroORM.init({
    clientUrl: databaseUrl,
    entities: gatewayEntities,
    extensions: [Migrator],
    // Migrations are the committed files, listed explicitly: no schema sync, no file globbing.
    migrations: { migrationsList: gatewayMigrations, transactional: true, snapshot: false, silent: true },
    pool: { min: 0, max: opts.poolMax ?? 10 },
    debug: false,
    discovery: { warnWhenNoEntities: false },
  });
}

/** Applies every pending migration; safe to run from several processes (MikroORM locks its table). */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}
