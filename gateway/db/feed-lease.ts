// The replica leases of the change feed (table gateway_cache_replicas, Migration20261124110000):
// a replica may answer from memory only while it holds one, and a writer waits for the
// acknowledgement of every replica holding one (change-feed.ts). These are their statements.

// A lease is taken for LEASE_MS of the database's clock from when its statement runs; this
// process counts it from when it sent the statement, less a margin for clock rates, so its own
// end of the lease always comes first.
export const LEASE_MARGIN_MS = 500;

export const RENEW_LEASE = `insert into gateway_cache_replicas (replica_id, lease_until) values ($1, clock_timestamp() + $2 * interval '1 millisecond')
  on conflict (replica_id) do update set lease_until = excluded.lease_until`;
// Replicas of processes long gone (their rows are never read once their lease has passed).
export const FORGET_OLD_REPLICAS = `delete from gateway_cache_replicas where lease_until < clock_timestamp() - interval '1 hour'`;
export const LEASED_REPLICAS = `select replica_id, ceil(extract(epoch from lease_until - clock_timestamp()) * 1000)::int as remaining_ms
  from gateway_cache_replicas where lease_until > clock_timestamp()`;
// Writers need not wait for a replica that is gone.
export const RELEASE_LEASE = 'delete from gateway_cache_replicas where replica_id = $1';
