import { Migration } from '@mikro-orm/migrations';

// Policy decision retention (workflows/retention.ts) deletes the oldest decisions across all
// tenants in bounded batches: this index lets each batch find them without scanning the table.
export class Migration20261122150000_policy_decision_retention extends Migration {
  override up(): void {
    this.addSql('create index policy_decisions_created_at on policy_decisions (created_at)');
  }

  override down(): void {
    this.addSql('drop index if exists policy_decisions_created_at');
  }
}
