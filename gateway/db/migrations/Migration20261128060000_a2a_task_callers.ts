import { Migration } from '@mikro-orm/migrations';

// A2A task bindings name the caller side a task belongs to (gateway/a2a/tasks.ts): '' for the
// tenant's /v1 side, `x402:<address>` for a public agent's payer. Rows bound before this column
// existed were all bound through /v1 (the tenant's side), which the default says.
export class Migration20261128060000_a2a_task_callers extends Migration {
  override up(): void {
    this.addSql(`alter table a2a_tasks add column caller text not null default ''`);
  }

  override down(): void {
    this.addSql(`alter table a2a_tasks drop column if exists caller`);
  }
}
