import { Migration } from '@mikro-orm/migrations';

// The payment that took an x402 A2A payment task (gateway/a2a/payment-tasks.ts), `payer:nonce`:
// the task stays for that payment's retries (its settlement not known yet) and for no other.
export class Migration20261128080000_a2a_payment_task_payer extends Migration {
  override up(): void {
    this.addSql(`alter table a2a_payment_tasks add column paid_by text`);
  }

  override down(): void {
    this.addSql(`alter table a2a_payment_tasks drop column if exists paid_by`);
  }
}
