// A tenant's budgets as admission reads them: every call of a tenant with budgets looks them up,
// so they are kept per tenant in this process and kept honest by the change feed (a write on any
// replica notifies `budget:<tenant>`, Migration20261206160000_budgets), as policies are. A tenant
// without budgets is remembered as such: its calls cost one map lookup.
import type { GatewayDb } from '../db/orm.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { createFeedCache } from '../db/feed-cache.ts';
import { BudgetSchema, type Budget } from './entity.ts';

const PREFIX = 'budget:';
/** A tenant's budgets never change without a notification; the TTL only bounds what a lost one could cost. */
const TTL_MS = 5 * 60_000;

export type BudgetReads = { of(tenantId: string): Promise<Budget[]> };

export function createBudgetReads(db: GatewayDb, feed: ChangeFeed): BudgetReads {
  const cache = createFeedCache<Budget[]>(feed, {
    keyOf: (key) => (key.startsWith(PREFIX) ? key.slice(PREFIX.length) : null),
    ttlMs: TTL_MS,
  });
  return {
    of: (tenantId) =>
      cache.get(tenantId, () => db.em.fork().find(BudgetSchema, { tenantId }, { orderBy: { id: 'asc' } })),
  };
}
