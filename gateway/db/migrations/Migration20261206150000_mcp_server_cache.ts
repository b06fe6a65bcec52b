import { Migration } from '@mikro-orm/migrations';

// The virtual MCP servers and their sessions join the API's per-process caches
// (gateway/db/change-feed.ts, gateway/mcp-servers/reads.ts): every write to `mcp_servers` or
// `mcp_server_sessions` notifies channel `gateway_cache` in the writing transaction, as writes
// to `agents` and `policies` do (Migration20261122140000_cache_invalidation), with the payloads
// `mcp-server:<id>` and `mcp-session:<id>`.
// The function keeps every earlier branch (the settlement one of
// Migration20261206130000_settlement_cache_notify included).
const NOTIFY = (extra: string) => `
  create or replace function gateway_cache_notify() returns trigger language plpgsql as $$
  begin
    if tg_level = 'STATEMENT' then
      perform pg_notify('gateway_cache', '*');
    elsif tg_table_name = 'agents' then
      perform pg_notify('gateway_cache', 'agent:' || coalesce(new.id, old.id));
    elsif tg_table_name in ('settlement_configs', 'credentials') then
      perform pg_notify('gateway_cache', 'settlement:' || coalesce(new.tenant_id, old.tenant_id));${extra}
    else
      perform pg_notify('gateway_cache', 'policy:' || coalesce(new.tenant_id, old.tenant_id));
    end if;
    return null;
  end
  $$`;

const TABLES = ['mcp_servers', 'mcp_server_sessions'];

export class Migration20261206150000_mcp_server_cache extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '5s'`);
    this.addSql(
      NOTIFY(`
    elsif tg_table_name = 'mcp_servers' then
      perform pg_notify('gateway_cache', 'mcp-server:' || coalesce(new.id, old.id));
    elsif tg_table_name = 'mcp_server_sessions' then
      perform pg_notify('gateway_cache', 'mcp-session:' || coalesce(new.id, old.id));`),
    );
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
    for (const table of TABLES) {
      this.addSql(`drop trigger if exists ${table}_cache_notify on ${table}`);
      this.addSql(`drop trigger if exists ${table}_cache_truncate on ${table}`);
    }
    this.addSql(NOTIFY(''));
  }
}
