import { Migration } from '@mikro-orm/migrations';

// The x402 payment-identifier extension: a payer's idempotency key, kept with the claim of the
// payment it first came with. Unique per (tenant, agent, payer) while set, so two authorizations
// racing under one identifier cannot both be claimed; an identifier older than the window the
// gateway honours is cleared before a new claim takes it (gateway/payment/binding.ts).
export class Migration20261127120000_payment_identifiers extends Migration {
  override up(): void {
    this.addSql(`alter table payment_claims add column payment_id text`);
    this.addSql(
      `create unique index payment_claims_payment_id on payment_claims (tenant_id, agent_id, payer, payment_id) where payment_id is not null`,
    );
  }

  override down(): void {
    this.addSql('drop index if exists payment_claims_payment_id');
    this.addSql('alter table payment_claims drop column if exists payment_id');
  }
}
