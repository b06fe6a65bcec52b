import { Migration } from '@mikro-orm/migrations';

// Trust receipts: one signed receipt per completed invocation of an agent with
// emit_receipts. The invocation keeps the SHA-256 of the upstream's response body, whether
// or not the body itself is captured, so a receipt can commit to it.
export class Migration20261122100200_receipts extends Migration {
  override up(): void {
    this.addSql(`alter table invocations add column response_sha256 text`);
    this.addSql(`
      create table receipts (
        invocation_id text primary key,
        tenant_id text not null,
        agent_id text not null,
        kid text not null,
        jws text not null,
        created_at timestamptz not null default now()
      )`);
  }

  override down(): void {
    this.addSql('drop table if exists receipts');
    this.addSql('alter table invocations drop column if exists response_sha256');
  }
}
