import { Migration } from '@mikro-orm/migrations';

// x402 payment claims: one row per (network, asset, payer, nonce), inserted before the payment
// is settled and bound to exactly one invocation. The UNIQUE constraints are the guarantee
// that one payment buys one call, whatever the concurrency.
export class Migration20261122120000_payment_claims extends Migration {
  override up(): void {
    this.addSql(`
      create table payment_claims (
        id text primary key,
        tenant_id text not null,
        agent_id text not null,
        network text not null,
        asset text not null,
        payer text not null,
        nonce text not null,
        amount text not null,
        status text not null check (status in ('claimed', 'settled', 'unsettled')),
        transaction text,
        invocation_id text unique,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        unique (network, asset, payer, nonce)
      )`);
    this.addSql(`create index payment_claims_tenant_created on payment_claims (tenant_id, created_at desc)`);
  }

  override down(): void {
    this.addSql('drop table if exists payment_claims');
  }
}
