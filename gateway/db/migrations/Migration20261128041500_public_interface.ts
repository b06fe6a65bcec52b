import { Migration } from '@mikro-orm/migrations';

// What a caller needs to know to call a public agent (docs/API.md "Selling an agent to any x402
// client", "Describing the agent"): the input body's JSON Schema or example, an output example,
// and per MCP tool its input schema. Shown in the discovery catalog and in v2 challenges; the
// API validates and bounds it on save.
export class Migration20261128041500_public_interface extends Migration {
  override up(): void {
    this.addSql(`alter table agents add column public_interface jsonb null`);
  }

  override down(): void {
    this.addSql('alter table agents drop column if exists public_interface');
  }
}
