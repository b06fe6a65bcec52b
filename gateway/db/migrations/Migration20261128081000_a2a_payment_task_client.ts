import { Migration } from '@mikro-orm/migrations';

// The client that had an x402 A2A payment task kept (gateway/a2a/payment-tasks.ts), as a digest
// of its rate-limit identity: each client holds a bounded share of a tenant's live rows.
export class Migration20261128081000_a2a_payment_task_client extends Migration {
  override up(): void {
    this.addSql(`alter table a2a_payment_tasks add column client_key text not null default ''`);
    this.addSql(`create index a2a_payment_tasks_client on a2a_payment_tasks (client_key, expires_at)`);
  }

  override down(): void {
    this.addSql(`drop index if exists a2a_payment_tasks_client`);
    this.addSql(`alter table a2a_payment_tasks drop column if exists client_key`);
  }
}
