// The gateway's indexes over tables that may already be large are built without blocking their
// writes (Migration20261206180000_concurrent_indexes): while a build waits for a transaction
// that writes the table, other writes to that table go through (a plain `create index` would
// queue them behind it); a build left invalid by an interrupted migrate is built anew by the
// next; the charges index a database's earlier migration made is replaced.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { dropDatabase, ensureDatabase, withDatabase } from '../../scripts/lib/postgres.ts';
import { migrate, openOrm } from '../../gateway/db/orm.ts';

const BEFORE = 'Migration20261206170000_channel_claim_rounds';
const INDEXES = [
  'invocations_charges_due_tenant',
  'invocations_tenant_budget',
  'invocations_analytics_xid',
  'payment_claims_unbound_signed',
];

function insertBinding(client: pg.Client | pg.PoolClient, tenant: string): Promise<unknown> {
  return client.query(
    `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status)
     values ($1, $2, 'agent', 'eip155:8453', '0xasset', '0xpayer', $1, '1', 'claimed')`,
    [randomBytes(8).toString('hex'), tenant],
  );
}

/** The named indexes and whether each is valid. */
async function indexes(client: pg.Client): Promise<Map<string, { valid: boolean; def: string }>> {
  const { rows } = await client.query<{ name: string; valid: boolean; def: string }>(
    `select c.relname as name, i.indisvalid as valid, pg_get_indexdef(i.indexrelid) as def
       from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = any($1)`,
    [INDEXES],
  );
  return new Map(rows.map((r) => [r.name, { valid: r.valid, def: r.def }]));
}

describe('migrations: indexes on large tables built concurrently', function () {
  this.timeout(120_000);
  let url: string;
  let orm: MikroORM;
  let client: pg.Client;

  beforeEach(async () => {
    url = withDatabase(stack().config.databaseUrl, `concurrent_ix_${randomBytes(4).toString('hex')}`);
    await ensureDatabase(url);
    orm = await openOrm(url, { poolMax: 3, poolMin: 0 });
    await orm.migrator.up({ to: BEFORE });
    client = new pg.Client({ connectionString: url });
    await client.connect();
  });

  afterEach(async () => {
    await client?.end().catch(() => undefined);
    await orm?.close(true).catch(() => undefined);
    await dropDatabase(url).catch(() => undefined);
  });

  it("a build waiting for a writer's transaction lets the table's other writes through, then every index is valid", async () => {
    // A writer holds payment_claims open: the concurrent build waits for it to end.
    await client.query('begin');
    await insertBinding(client, 'writer');
    const migrating = migrate(orm);
    const pool = new pg.Client({ connectionString: url });
    await pool.connect();
    try {
      await waitFor(
        async () =>
          (
            await pool.query(
              `select 1 from pg_stat_activity where datname = current_database()
                and query like 'create index concurrently if not exists payment_claims_unbound_signed%'
                and wait_event_type = 'Lock'`,
            )
          ).rowCount,
        { what: 'the payment_claims build waiting for the open writer', timeoutMs: 60_000 },
      );
      // Another write to the same table meanwhile: a plain build's SHARE lock, queued behind
      // the writer, would hold it (and every call's write) until the statement timeout.
      await pool.query(`set statement_timeout = '5s'`);
      await insertBinding(pool, 'other');
      assert.equal((await pool.query('select count(*)::int as n from payment_claims')).rows[0].n, 1);
    } finally {
      await pool.end();
    }
    await client.query('commit');
    assert.ok((await migrating).includes('Migration20261206180000_concurrent_indexes'));
    const built = await indexes(client);
    for (const name of INDEXES) assert.equal(built.get(name)?.valid, true, `${name} valid`);
  });

  it('an index left invalid by an interrupted build is built anew; the one an earlier migration made is replaced', async () => {
    // What an interrupted concurrent build leaves: an invalid index under the name.
    await insertBinding(client, 'same');
    await insertBinding(client, 'same');
    await assert.rejects(
      client.query(`create unique index concurrently payment_claims_unbound_signed on payment_claims (tenant_id)`),
      /could not create unique index/,
    );
    assert.equal((await indexes(client)).get('payment_claims_unbound_signed')?.valid, false);
    // What Migration20261206130000_metered_settlement created before it left the index to this one,
    // which replaces it.
    await client.query(`create index invocations_charges_due on invocations (completed_at)
      where payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')
        and status in ('succeeded', 'failed')`);

    await migrate(orm);
    const built = await indexes(client);
    for (const name of INDEXES) assert.equal(built.get(name)?.valid, true, `${name} valid`);
    assert.match(
      built.get('payment_claims_unbound_signed')!.def,
      /WHERE \(\(invocation_id IS NULL\) AND \(signed_payment IS NOT NULL\)\)/,
    );
    assert.doesNotMatch(built.get('payment_claims_unbound_signed')!.def, /UNIQUE/);
  });
});
