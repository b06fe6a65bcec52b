import { Migration } from '@mikro-orm/migrations';

// Transactional calls still `pending` or `running`: the closed-workflow check
// (temporal/unfinished-calls.ts) looks among the ones not moved for a while for rows whose
// workflow closed without completing them. The partial index holds only calls in flight, so
// the check reads a handful of entries, not the table.
export class Migration20261127100000_unfinished_calls extends Migration {
  override up(): void {
    this.addSql(
      `create index invocations_unfinished on invocations (updated_at) where status in ('pending', 'running') and mode = 'transactional'`,
    );
  }

  override down(): void {
    this.addSql('drop index if exists invocations_unfinished');
  }
}
