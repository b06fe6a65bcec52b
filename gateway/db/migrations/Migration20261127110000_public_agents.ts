import { Migration } from '@mikro-orm/migrations';

// Public paid agents (docs/API.md "Selling an agent to any x402 client"): a tenant may open a
// priced agent to any x402 client, no token. `public_description` is the only text of the agent,
// besides its name and price, that an unauthenticated caller sees. The check keeps a public agent
// priced whatever path writes the row; the partial index serves listings of the open agents.
export class Migration20261127110000_public_agents extends Migration {
  override up(): void {
    this.addSql(
      `alter table agents
         add column public boolean not null default false,
         add column public_description text null`,
    );
    this.addSql(`alter table agents add constraint agents_public_priced check (not public or pricing is not null)`);
    this.addSql(`create index agents_public on agents (created_at, id) where public and deleted_at is null`);
  }

  override down(): void {
    this.addSql('drop index if exists agents_public');
    this.addSql('alter table agents drop constraint if exists agents_public_priced');
    this.addSql('alter table agents drop column if exists public_description, drop column if exists public');
  }
}
