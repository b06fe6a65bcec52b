import { Migration } from '@mikro-orm/migrations';

// Policy documents (one per tenant, replaced wholesale; `version` counts replaces) and the
// decisions recorded on every evaluation. Decisions carry no call content by construction:
// there is no column that could hold a body.
export class Migration20261122100000_policy extends Migration {
  override up(): void {
    this.addSql(`
      create table policies (
        tenant_id text primary key,
        version integer not null check (version > 0),
        document jsonb not null,
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table policy_decisions (
        id text primary key,
        tenant_id text not null,
        agent_id text not null,
        protocol text not null,
        mcp_tool text,
        action text not null check (action in ('allow', 'warn', 'deny')),
        matched_rule text not null default '',
        reason text not null,
        created_at timestamptz not null default now()
      )`);
    // Newest first per tenant: the only read path (GET /v1/policy/decisions).
    this.addSql(
      `create index policy_decisions_tenant_newest on policy_decisions (tenant_id, created_at desc, id desc)`,
    );
  }

  override down(): void {
    this.addSql('drop table if exists policy_decisions');
    this.addSql('drop table if exists policies');
  }
}
