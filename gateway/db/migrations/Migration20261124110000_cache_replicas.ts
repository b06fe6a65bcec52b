import { Migration } from '@mikro-orm/migrations';

// The API processes whose gate caches answer from memory, each under a lease it renews on its
// change-feed connection (gateway/db/change-feed.ts). A write to an agent or a policy made
// through the API asks every replica holding a lease to acknowledge that it has applied the
// change, and answers once each has, or once the lease of one that did not has run out: by the
// writer's answer the change is in force everywhere, with no round trip on the proxy's path.
export class Migration20261124110000_cache_replicas extends Migration {
  override up(): void {
    this.addSql(`
      create table gateway_cache_replicas (
        replica_id text primary key,
        lease_until timestamptz not null
      )`);
  }

  override down(): void {
    this.addSql('drop table gateway_cache_replicas');
  }
}
