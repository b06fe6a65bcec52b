import { Migration } from '@mikro-orm/migrations';

// Budgets (gateway/budgets/): a tenant's caps on spend and calls over a calendar window, read by
// every call's admission from a per-process cache kept honest by the change feed: every write to
// `budgets` notifies `budget:<tenant_id>` on channel `gateway_cache` in the writing transaction,
// as agents, policies and settlement configurations do. The function keeps every earlier branch
// (Migration20261206150000_mcp_server_cache's). `budget_alert_secrets` holds each tenant's
// alert-signing secret, envelope-encrypted like a managed credential (shown once, never stored
// in the clear). What a window has used lives in Redis (or the API process's memory), not here.
// A call a budget refused is recorded as a failed invocation (`error_class` `budget_exceeded`)
// naming the budget (`invocations.budget_id`), so the invocation list shows refusals by budget;
// the partial index serves that filter and costs the other rows nothing.
const NOTIFY = (extra: string) => `
  create or replace function gateway_cache_notify() returns trigger language plpgsql as $$
  begin
    if tg_level = 'STATEMENT' then
      perform pg_notify('gateway_cache', '*');
    elsif tg_table_name = 'agents' then
      perform pg_notify('gateway_cache', 'agent:' || coalesce(new.id, old.id));
    elsif tg_table_name in ('settlement_configs', 'credentials') then
      perform pg_notify('gateway_cache', 'settlement:' || coalesce(new.tenant_id, old.tenant_id));
    elsif tg_table_name = 'mcp_servers' then
      perform pg_notify('gateway_cache', 'mcp-server:' || coalesce(new.id, old.id));
    elsif tg_table_name = 'mcp_server_sessions' then
      perform pg_notify('gateway_cache', 'mcp-session:' || coalesce(new.id, old.id));${extra}
    else
      perform pg_notify('gateway_cache', 'policy:' || coalesce(new.tenant_id, old.tenant_id));
    end if;
    return null;
  end
  $$`;

export class Migration20261206160000_budgets extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '5s'`);
    this.addSql(`create table budgets (
      id text primary key,
      tenant_id text not null,
      name text not null,
      scope jsonb not null default '{}'::jsonb,
      limit_amount text null,
      limit_calls bigint null,
      time_window text not null check (time_window in ('hour', 'day', 'week', 'month', 'total')),
      mode text not null check (mode in ('hard', 'soft')),
      alert_thresholds jsonb null,
      webhook_url text null,
      created_by text not null,
      created_at timestamptz not null,
      updated_at timestamptz not null,
      check (limit_amount is not null or limit_calls is not null)
    )`);
    this.addSql(`create unique index budgets_tenant_name on budgets (tenant_id, name)`);
    this.addSql(`create table budget_alert_secrets (
      tenant_id text primary key,
      kek_id text not null,
      wrapped_key bytea not null,
      secret_ciphertext bytea not null,
      created_at timestamptz not null default now()
    )`);
    this.addSql(`alter table invocations add column budget_id text null`);
    // Its index, invocations_tenant_budget, is built without blocking the table's writes by
    // Migration20261206180000_concurrent_indexes (this one created it before).
    this.addSql(
      NOTIFY(`
    elsif tg_table_name = 'budgets' then
      perform pg_notify('gateway_cache', 'budget:' || coalesce(new.tenant_id, old.tenant_id));`),
    );
    this.addSql(
      `create trigger budgets_cache_notify after insert or update or delete on budgets for each row execute function gateway_cache_notify()`,
    );
    this.addSql(
      `create trigger budgets_cache_truncate after truncate on budgets for each statement execute function gateway_cache_notify()`,
    );
  }

  override down(): void {
    this.addSql(`drop trigger if exists budgets_cache_notify on budgets`);
    this.addSql(`drop trigger if exists budgets_cache_truncate on budgets`);
    this.addSql(NOTIFY(''));
    this.addSql(`drop index if exists invocations_tenant_budget`);
    this.addSql(`alter table invocations drop column if exists budget_id`);
    this.addSql(`drop table if exists budget_alert_secrets`);
    this.addSql(`drop table if exists budgets`);
  }
}
