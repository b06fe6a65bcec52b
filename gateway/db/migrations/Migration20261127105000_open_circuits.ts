import { Migration } from '@mikro-orm/migrations';

// The circuits the breakers of any API or worker announce open (gateway/upstream/open-circuits.ts),
// for deployments without Redis: the payment gate of every API reads them, so a paid call to an
// upstream a worker's breaker knows is failing is refused before payment. Keyed by a hash of
// (tenant, origin); the deadline is on the database's clock, so no process's clock matters.
export class Migration20261127105000_open_circuits extends Migration {
  override up(): void {
    this.addSql(`create table open_circuits (circuit text primary key, open_until timestamptz not null)`);
  }

  override down(): void {
    this.addSql('drop table if exists open_circuits');
  }
}
