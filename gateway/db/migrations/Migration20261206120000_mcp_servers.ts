import { Migration } from '@mikro-orm/migrations';

// Virtual MCP servers (gateway/mcp-servers/): one MCP endpoint federating several MCP agents of
// a tenant. A server's members are a short list read whole with it, so they are a JSON column.
// A client's session maps to the member sessions opened for it, in PostgreSQL so that it
// survives a restart of the API and continues on any replica. An invocation made through a
// virtual server names it.
export class Migration20261206120000_mcp_servers extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '5s'`);
    this.addSql(`create table mcp_servers (
      id text primary key,
      tenant_id text not null,
      name text not null,
      description text null,
      members jsonb not null,
      created_by text not null,
      created_at timestamptz not null,
      updated_at timestamptz not null
    )`);
    this.addSql(`create unique index mcp_servers_tenant_name on mcp_servers (tenant_id, name)`);
    this.addSql(`create table mcp_server_sessions (
      id text primary key,
      tenant_id text not null,
      server_id text not null,
      caller text not null,
      member_sessions jsonb not null default '{}'::jsonb,
      created_at timestamptz not null default now(),
      used_at timestamptz not null default now()
    )`);
    this.addSql(`create index mcp_server_sessions_server on mcp_server_sessions (server_id)`);
    this.addSql(`alter table invocations add column mcp_server_id text null`);
  }

  override down(): void {
    this.addSql(`alter table invocations drop column if exists mcp_server_id`);
    this.addSql(`drop table if exists mcp_server_sessions`);
    this.addSql(`drop table if exists mcp_servers`);
  }
}
