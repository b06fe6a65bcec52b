// The tenant's facilitator target (its URL and the client certificate and key of its facilitator
// credential) as the challenge needs it to read the facilitator's kinds (./supported.ts): kept per
// tenant for a minute, so an unpaid call of a metered agent does not read the settlement
// configuration and the credential (from PostgreSQL or Vault) each time. Kept only while the
// change feed is live; a write to the tenant's settlement configuration or to any of its
// credentials drops it on every replica (`settlement:<tenant_id>`,
// Migration20261206130000_settlement_cache_notify), and a Vault secret rotated outside the
// gateway is seen within the minute. A settle still reads the target itself (flow.ts), so a
// rotated credential takes effect on the next settle.
import type { ChangeFeed } from '../db/change-feed.ts';
import { createFeedCache } from '../db/feed-cache.ts';
import { loadSettlementClientTls, type SettlementClientTls } from '../settlement/tls.ts';

const TARGET_TTL_MS = 60_000;
const PREFIX = 'settlement:';

type TargetDeps = Parameters<typeof loadSettlementClientTls>[0];

export type FacilitatorTargets = {
  /** The tenant's target, null without settlement configured; throws what loadSettlementClientTls throws (not kept). */
  of(deps: TargetDeps, tenantId: string): Promise<SettlementClientTls | null>;
};

/** `load` reads a tenant's target (loadSettlementClientTls; a test counts its reads). */
export function createFacilitatorTargets(
  feed: ChangeFeed,
  load: typeof loadSettlementClientTls = loadSettlementClientTls,
): FacilitatorTargets {
  const cache = createFeedCache<SettlementClientTls | null>(feed, {
    keyOf: (key) => (key.startsWith(PREFIX) ? key.slice(PREFIX.length) : null),
    ttlMs: TARGET_TTL_MS,
  });
  return { of: (deps, tenantId) => cache.get(tenantId, () => load(deps, tenantId)) };
}
