// The agents the discovery catalog lists (api/discovery/catalog.ts builds its entries from them).
import { AgentSchema, type Agent } from '../db/entities.ts';
import type { GatewayDb } from '../db/orm.ts';

/**
 * The public agents that can be called: public, not deleted, not suspended, with an upstream;
 * at most `maxAgents`, the oldest first.
 */
export function callablePublicAgents(db: GatewayDb, maxAgents: number): Promise<Agent[]> {
  return db.em
    .fork()
    .find(
      AgentSchema,
      { public: true, deletedAt: null, suspended: false, upstreamUrl: { $ne: null } },
      { orderBy: { createdAt: 'asc', id: 'asc' }, limit: maxAgents },
    );
}
