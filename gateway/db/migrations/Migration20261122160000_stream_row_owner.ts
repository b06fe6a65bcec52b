import { Migration } from '@mikro-orm/migrations';

// Streaming rows name the API process that writes them (gateway/invocations/row-session.ts: an owner id
// held as a session advisory lock), so the stale-stream sweep can fail the `running` rows of a
// process that died (gateway/invocations/stale-streams.ts). The partial index holds only live streaming
// rows: the sweep reads it, the other writes barely notice it.
export class Migration20261122160000_stream_row_owner extends Migration {
  override up(): void {
    this.addSql('alter table invocations add column owner text');
    this.addSql(
      `create index invocations_running_streams on invocations (owner) where status = 'running' and mode = 'streaming'`,
    );
  }

  override down(): void {
    this.addSql('drop index if exists invocations_running_streams');
    this.addSql('alter table invocations drop column if exists owner');
  }
}
