import { Migration } from '@mikro-orm/migrations';

// The tenant's settlement configuration (one row per tenant) and the credential list's
// pagination index. The foreign key is a second guard behind the API's 409: a credential
// that is the facilitator credential cannot be deleted.
export class Migration20261122110000_settlement_config extends Migration {
  override up(): void {
    this.addSql(`
      create table settlement_configs (
        tenant_id text primary key,
        facilitator_url text not null,
        facilitator_credential_ref text not null references credentials (id) on delete restrict,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`create index settlement_configs_credential on settlement_configs (facilitator_credential_ref)`);
    this.addSql(`create index credentials_tenant_id on credentials (tenant_id, id)`);
  }

  override down(): void {
    this.addSql('drop index if exists credentials_tenant_id');
    this.addSql('drop table if exists settlement_configs');
  }
}
