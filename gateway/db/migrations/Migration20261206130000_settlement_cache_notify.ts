import { Migration } from '@mikro-orm/migrations';

// Change notifications for the tenant's facilitator target as the payment gate keeps it
// (gateway/payment/targets.ts): a write to a tenant's settlement configuration or to any of its
// credentials (the facilitator credential's certificate and key) notifies `settlement:<tenant_id>`
// on the `gateway_cache` channel in the writing transaction, as agents and policies already do
// (Migration20261122140000_cache_invalidation); a truncate notifies `*`. The function keeps every
// earlier branch.
const NOTIFY = (settlement: boolean) => `
  create or replace function gateway_cache_notify() returns trigger language plpgsql as $$
  begin
    if tg_level = 'STATEMENT' then
      perform pg_notify('gateway_cache', '*');
    elsif tg_table_name = 'agents' then
      perform pg_notify('gateway_cache', 'agent:' || coalesce(new.id, old.id));${
        settlement
          ? `
    elsif tg_table_name in ('settlement_configs', 'credentials') then
      perform pg_notify('gateway_cache', 'settlement:' || coalesce(new.tenant_id, old.tenant_id));`
          : ''
      }
    else
      perform pg_notify('gateway_cache', 'policy:' || coalesce(new.tenant_id, old.tenant_id));
    end if;
    return null;
  end
  $$`;

const TABLES = ['settlement_configs', 'credentials'];

export class Migration20261206130000_settlement_cache_notify extends Migration {
  override up(): void {
    // Creating a trigger takes a lock that conflicts with writes: wait briefly, never queue behind a long one.
    this.addSql(`set local lock_timeout = '5s'`);
    this.addSql(NOTIFY(true));
    for (const table of TABLES) {
      this.addSql(
        `create trigger ${table}_cache_notify after insert or update or delete on ${table} for each row execute function gateway_cache_notify()`,
      );
      this.addSql(
        `create trigger ${table}_cache_truncate after truncate on ${table} for each statement execute function gateway_cache_notify()`,
      );
    }
  }

  override down(): void {
    this.addSql(`set local lock_timeout = '5s'`);
    for (const table of TABLES) {
      this.addSql(`drop trigger if exists ${table}_cache_notify on ${table}`);
      this.addSql(`drop trigger if exists ${table}_cache_truncate on ${table}`);
    }
    this.addSql(NOTIFY(false));
  }
}
