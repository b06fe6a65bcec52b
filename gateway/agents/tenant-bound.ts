// How many live agents (active or pending: not deleted) one tenant may have, TENANT_MAX_AGENTS.
// Each agent has its own rate-limit bucket, so without a bound a tenant could multiply its
// buckets, and its agents' rows and cache entries, as far as it likes.
import type { EntityManager } from '@mikro-orm/postgresql';
import { AgentSchema } from '../db/entities.ts';

/**
 * True when the tenant may create one more agent, inside the transaction that inserts it. The
 * tenant's creates queue on a transaction-scoped advisory lock keyed by the tenant, taken
 * before the count, so two concurrent creates cannot both count `max - 1`: the bound holds
 * exactly, across API replicas. Another tenant sharing the lock's 64-bit hash only waits for a
 * create's short transaction.
 */
export async function hasRoomForAgent(em: EntityManager, tenantId: string, max: number): Promise<boolean> {
  await em.execute('select pg_advisory_xact_lock(hashtextextended(?, 0))', [`agents:${tenantId}`]);
  return (await em.count(AgentSchema, { tenantId, deletedAt: null })) < max;
}
