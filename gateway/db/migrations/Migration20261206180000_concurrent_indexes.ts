import { Migration } from '@mikro-orm/migrations';

// Indexes over large tables, built without blocking their writes. A plain `create index` holds
// a SHARE lock on its table for the whole build: on a large invocations table every call's
// insert and completion would queue behind it for minutes. `create index concurrently` takes a
// lock that writes do not conflict with, and cannot run inside a transaction, so this migration
// runs outside one (isTransactional, with the migrator's allOrNothing off: gateway/db/orm.ts).
//
// - invocations_tenant_budget and invocations_analytics_xid were created by
//   Migration20261206160000_budgets and Migration20261206160000_analytics_fold, which no longer
//   create them: a database that ran those already has them (`if not exists` leaves them be),
//   one that had not gets them here;
// - invocations_charges_due_tenant: the metered rows whose charge is still due, by tenant, which
//   the due-charges round reads a fair share of per tenant (gateway/payment/charges-due.ts). It
//   replaces invocations_charges_due (completed_at only), which
//   Migration20261206130000_metered_settlement created before and which is dropped here, also
//   without blocking;
// - payment_claims_unbound_signed: the bindings never bound to a call that still hold the
//   payer's signed payment, which the retention workflow clears (activities/retention.ts).
//
// A concurrent build that fails (cancelled, a unique violation, the process killed) leaves an
// INVALID index that `if not exists` would keep forever: such a leftover is dropped first, so
// running this again finishes the job.
const INDEXES: Array<{ name: string; create: string }> = [
  {
    name: 'invocations_charges_due_tenant',
    create: `on invocations (tenant_id, completed_at)
      where payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')
        and status in ('succeeded', 'failed')`,
  },
  {
    name: 'invocations_tenant_budget',
    create: `on invocations (tenant_id, budget_id, created_at desc, id desc) where budget_id is not null`,
  },
  {
    name: 'invocations_analytics_xid',
    create: `on invocations (analytics_xid) where analytics_xid is not null`,
  },
  {
    name: 'payment_claims_unbound_signed',
    create: `on payment_claims (updated_at) where invocation_id is null and signed_payment is not null`,
  },
];

export class Migration20261206180000_concurrent_indexes extends Migration {
  override isTransactional(): boolean {
    return false;
  }

  override async up(): Promise<void> {
    const invalid = await this.execute(
      `select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid
        where not i.indisvalid and c.relname in (${INDEXES.map((i) => `'${i.name}'`).join(', ')})`,
    );
    for (const { name } of invalid as Array<{ name: string }>) this.addSql(`drop index concurrently if exists ${name}`);
    for (const index of INDEXES) this.addSql(`create index concurrently if not exists ${index.name} ${index.create}`);
    this.addSql(`drop index concurrently if exists invocations_charges_due`);
  }

  override down(): void {
    // The budgets' and the analytics' indexes belong to the migrations that created them first
    // (their down drops them); the charges' goes back to its first shape.
    this.addSql(`drop index concurrently if exists payment_claims_unbound_signed`);
    this.addSql(`create index concurrently if not exists invocations_charges_due on invocations (completed_at)
      where payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')
        and status in ('succeeded', 'failed')`);
    this.addSql(`drop index concurrently if exists invocations_charges_due_tenant`);
  }
}
