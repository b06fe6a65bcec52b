import { Migration } from '@mikro-orm/migrations';

// Change notifications for the API's per-process caches (gateway/db/change-feed.ts): every write
// to `agents` or `policies` notifies channel `gateway_cache` in the writing transaction, so
// the notification is delivered exactly when the change commits, whatever code wrote it.
// Payloads: `agent:<id>`, `policy:<tenant_id>`, `*` (forget everything: a truncate, or a
// schema change that may make the cached rows unreadable, e.g. the store taken away).
// The schema-change hook is an event trigger, which only a superuser may create: without
// that privilege it is skipped (the caches then learn of DDL only through their TTL).
// Streaming calls also keep their request body digest on the row, for their receipts.
export class Migration20261122140000_cache_invalidation extends Migration {
  override up(): void {
    this.addSql(`
      create function gateway_cache_notify() returns trigger language plpgsql as $$
      begin
        if tg_level = 'STATEMENT' then
          perform pg_notify('gateway_cache', '*');
        elsif tg_table_name = 'agents' then
          perform pg_notify('gateway_cache', 'agent:' || coalesce(new.id, old.id));
        else
          perform pg_notify('gateway_cache', 'policy:' || coalesce(new.tenant_id, old.tenant_id));
        end if;
        return null;
      end
      $$`);
    for (const table of ['agents', 'policies']) {
      this.addSql(
        `create trigger ${table}_cache_notify after insert or update or delete on ${table} for each row execute function gateway_cache_notify()`,
      );
      this.addSql(
        `create trigger ${table}_cache_truncate after truncate on ${table} for each statement execute function gateway_cache_notify()`,
      );
    }
    this.addSql(`
      create function gateway_cache_notify_ddl() returns event_trigger language plpgsql as $$
      begin
        perform pg_notify('gateway_cache', '*');
      end
      $$`);
    this.addSql(`
      do $$
      begin
        if (select rolsuper from pg_roles where rolname = current_user) then
          create event trigger gateway_cache_ddl on ddl_command_end execute function gateway_cache_notify_ddl();
        end if;
      end
      $$`);
    this.addSql(`alter table invocations add column request_sha256 text`);
  }

  override down(): void {
    this.addSql('alter table invocations drop column if exists request_sha256');
    this.addSql('drop event trigger if exists gateway_cache_ddl');
    this.addSql('drop function if exists gateway_cache_notify_ddl()');
    for (const table of ['agents', 'policies']) {
      this.addSql(`drop trigger if exists ${table}_cache_notify on ${table}`);
      this.addSql(`drop trigger if exists ${table}_cache_truncate on ${table}`);
    }
    this.addSql('drop function if exists gateway_cache_notify()');
  }
}
