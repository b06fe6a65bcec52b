import { Migration } from '@mikro-orm/migrations';

// Virtual MCP server sessions unused for MCP_SERVER_SESSION_RETENTION_DAYS are purged by the
// hourly retention run (workflows/retention.ts), oldest use first: an index on when each was
// last used keeps each bounded batch from reading the whole table.
export class Migration20261206140000_mcp_server_session_retention extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '5s'`);
    this.addSql(`create index mcp_server_sessions_used_at on mcp_server_sessions (used_at)`);
  }

  override down(): void {
    this.addSql(`drop index if exists mcp_server_sessions_used_at`);
  }
}
