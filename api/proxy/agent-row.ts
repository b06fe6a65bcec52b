// The proxy needs its agent on every call. It is kept in a per-process cache that the change
// feed keeps honest (gateway/db/feed-cache.ts: any write to the agent's row, on any replica,
// drops it; while the feed is down every call reads the database). A miss is a plain
// primary-key read mapped by hand (a fraction of MikroORM's query building and hydration);
// the Agent type makes a column the entity gains and this mapping misses a type error.
// Cached agents are shared between calls: treat them as read-only.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Agent, Pricing } from '../../gateway/db/entities.ts';
import { changeFeedFor } from '../../gateway/db/change-feed.ts';
import { createFeedCache, type FeedCache } from '../../gateway/db/feed-cache.ts';

type Row = Record<string, unknown>;

const json = <T>(value: unknown): T => (typeof value === 'string' ? (JSON.parse(value) as T) : (value as T));
const date = (value: unknown): Date => (value instanceof Date ? value : new Date(String(value)));
const nullableNumber = (value: unknown): number | null =>
  value === null || value === undefined ? null : Number(value);

export function agentFromRow(row: Row): Agent {
  return {
    id: row.id as string,
    tenantId: row.tenant_id as string,
    name: row.name as string,
    description: (row.description as string | null) ?? null,
    tags: json<string[]>(row.tags),
    metadata: json<Record<string, unknown>>(row.metadata),
    upstreamUrl: (row.upstream_url as string | null) ?? null,
    credentialRef: (row.credential_ref as string | null) ?? null,
    emitReceipts: row.emit_receipts as boolean,
    captureBody: row.capture_body as boolean,
    protocol: row.protocol as 'http' | 'mcp',
    mcpTransport: (row.mcp_transport as string | null) ?? null,
    mcpProtocolVersion: (row.mcp_protocol_version as string | null) ?? null,
    pricing: row.pricing === null || row.pricing === undefined ? null : json<Pricing>(row.pricing),
    rateLimitRps: nullableNumber(row.rate_limit_rps),
    rateLimitBurst: nullableNumber(row.rate_limit_burst),
    retryNonIdempotent: row.retry_non_idempotent as boolean,
    suspended: row.suspended as boolean,
    suspendedReason: (row.suspended_reason as string | null) ?? null,
    deletedAt: row.deleted_at === null || row.deleted_at === undefined ? null : date(row.deleted_at),
    createdBy: row.created_by as string,
    createdAt: date(row.created_at),
    updatedAt: date(row.updated_at),
  };
}

const caches = new WeakMap<MikroORM, FeedCache<Agent | null>>();

function agentCacheFor(orm: MikroORM): FeedCache<Agent | null> {
  let cache = caches.get(orm);
  if (!cache) {
    cache = createFeedCache<Agent | null>(changeFeedFor(orm), {
      keyOf: (key) => (key.startsWith('agent:') ? key.slice('agent:'.length) : null),
      // An unknown id is not remembered: a 404 costs a read, a created agent is usable at once.
      cacheable: (agent) => agent !== null,
    });
    caches.set(orm, cache);
  }
  return cache;
}

async function readAgent(orm: MikroORM, id: string): Promise<Agent | null> {
  const rows = await orm.em.getConnection().execute<Row[]>('select * from agents where id = ?', [id]);
  return rows[0] ? agentFromRow(rows[0]) : null;
}

/** The tenant's agent (cached per process), or null when there is none with this id in the tenant. */
export async function loadAgent(orm: MikroORM, tenantId: string, id: string): Promise<Agent | null> {
  const agent = await agentCacheFor(orm).get(id, () => readAgent(orm, id));
  return agent && agent.tenantId === tenantId ? agent : null;
}

/**
 * After a committed write to an agent: this process forgets it at once, and the caller waits
 * until every replica has applied the change (ChangeFeed.publish): by the writer's answer, the
 * change is in force everywhere.
 */
export async function forgetAgent(orm: MikroORM, id: string): Promise<void> {
  const feed = changeFeedFor(orm);
  feed.invalidate(`agent:${id}`);
  await feed.publish();
}
