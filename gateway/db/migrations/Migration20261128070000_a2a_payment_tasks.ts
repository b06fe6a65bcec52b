import { Migration } from '@mikro-orm/migrations';

// The x402 A2A transport's payment tasks (gateway/a2a/payment-tasks.ts): the message a public A2A
// agent asked payment for, kept under the task id the gateway minted until it is paid or expires.
export class Migration20261128070000_a2a_payment_tasks extends Migration {
  override up(): void {
    this.addSql(`create table a2a_payment_tasks (
      task_id text primary key,
      tenant_id text not null,
      agent_id text not null,
      context_id text not null,
      method text not null,
      request text not null,
      -- the payment that took the task, payer:nonce: kept for that payment's retries alone
      paid_by text,
      -- a digest of the client's rate-limit identity: each client holds a bounded share of the rows
      client_key text not null default '',
      created_at timestamptz not null default now(),
      expires_at timestamptz not null
    )`);
    this.addSql(`create index a2a_payment_tasks_expires_at on a2a_payment_tasks (expires_at)`);
    this.addSql(`create index a2a_payment_tasks_tenant on a2a_payment_tasks (tenant_id, expires_at)`);
    this.addSql(`create index a2a_payment_tasks_client on a2a_payment_tasks (client_key, expires_at)`);
  }

  override down(): void {
    this.addSql(`drop table if exists a2a_payment_tasks`);
  }
}
