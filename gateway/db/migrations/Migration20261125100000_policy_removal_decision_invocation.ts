import { Migration } from '@mikro-orm/migrations';

// DELETE /v1/policy returns a tenant to "no policy": its row stays with no document (so the
// version keeps counting up across a removal and the next replace). Each decision records the
// invocation it decided (null for a deny: the call never became one). Nullable additions: no
// rewrite of either table.
export class Migration20261125100000_policy_removal_decision_invocation extends Migration {
  override up(): void {
    this.addSql('alter table policies alter column document drop not null');
    this.addSql('alter table policy_decisions add column invocation_id text');
  }

  override down(): void {
    this.addSql('alter table policy_decisions drop column if exists invocation_id');
    this.addSql('delete from policies where document is null');
    this.addSql('alter table policies alter column document set not null');
  }
}
