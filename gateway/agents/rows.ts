// The proxy needs its agent on every call. It is kept in a per-process cache that the change
// feed keeps honest (gateway/db/feed-cache.ts: any write to the agent's row, on any replica,
// drops it; while the feed is down every call reads the database). A miss is a plain
// primary-key read mapped by hand (a fraction of MikroORM's query building and hydration);
// the Agent type makes a column the entity gains and this mapping misses a type error.
// Cached agents are shared between calls: treat them as read-only.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Agent, AgentProtocol, Pricing, PublicInterface } from '../db/entities.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { createFeedCache } from '../db/feed-cache.ts';

type Row = Record<string, unknown>;

const json = <T>(value: unknown): T => (typeof value === 'string' ? (JSON.parse(value) as T) : (value as T));
const date = (value: unknown): Date => (value instanceof Date ? value : new Date(String(value)));
const nullableNumber = (value: unknown): number | null =>
  value === null || value === undefined ? null : Number(value);

function agentFromRow(row: Row): Agent {
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
    protocol: row.protocol as AgentProtocol,
    mcpTransport: (row.mcp_transport as string | null) ?? null,
    mcpProtocolVersion: (row.mcp_protocol_version as string | null) ?? null,
    pricing: row.pricing === null || row.pricing === undefined ? null : json<Pricing>(row.pricing),
    rateLimitRps: nullableNumber(row.rate_limit_rps),
    rateLimitBurst: nullableNumber(row.rate_limit_burst),
    retryNonIdempotent: row.retry_non_idempotent as boolean,
    suspended: row.suspended as boolean,
    suspendedReason: (row.suspended_reason as string | null) ?? null,
    public: row.public as boolean,
    publicDescription: (row.public_description as string | null) ?? null,
    publicInterface:
      row.public_interface === null || row.public_interface === undefined
        ? null
        : json<PublicInterface>(row.public_interface),
    a2aCard: row.a2a_card === null || row.a2a_card === undefined ? null : json<Record<string, unknown>>(row.a2a_card),
    a2aCardReadAt:
      row.a2a_card_read_at === null || row.a2a_card_read_at === undefined ? null : date(row.a2a_card_read_at),
    a2aPassUnknownMethods: (row.a2a_pass_unknown_methods as boolean | undefined) ?? false,
    deletedAt: row.deleted_at === null || row.deleted_at === undefined ? null : date(row.deleted_at),
    createdBy: row.created_by as string,
    createdAt: date(row.created_at),
    updatedAt: date(row.updated_at),
  };
}

/** The proxy's agent reads and the agent writers' invalidation, over one cache. */
export type AgentRows = {
  /** The tenant's agent (cached per process), or null when there is none with this id in the tenant. */
  load(tenantId: string, id: string): Promise<Agent | null>;
  /**
   * The agent, whatever its tenant, when it is public (not deleted): what the public URLs serve
   * (api/admission/public-door.ts); null otherwise. Same cache, so turning `public` off, suspending
   * or deleting the agent closes its URLs on every replica as the change feed delivers it.
   */
  loadPublic(id: string): Promise<Agent | null>;
  /**
   * After a committed write to an agent: this process forgets it at once, and the caller waits
   * until every replica has applied the change (ChangeFeed.publish): by the writer's answer, the
   * change is in force everywhere.
   */
  forget(id: string): Promise<void>;
};

async function readAgent(orm: MikroORM, id: string): Promise<Agent | null> {
  const rows = await orm.em.getConnection().execute<Row[]>('select * from agents where id = ?', [id]);
  return rows[0] ? agentFromRow(rows[0]) : null;
}

/** Built once per app (api/proxy/pipeline-parts.ts), shared by the gate and the agent lifecycle (gateway/agents/lifecycle.ts). */
export function createAgentRows(orm: MikroORM, feed: ChangeFeed): AgentRows {
  const cache = createFeedCache<Agent | null>(feed, {
    keyOf: (key) => (key.startsWith('agent:') ? key.slice('agent:'.length) : null),
    // An unknown id is not remembered: a 404 costs a read, a created agent is usable at once.
    cacheable: (agent) => agent !== null,
  });
  return {
    async load(tenantId, id) {
      const agent = await cache.get(id, () => readAgent(orm, id));
      return agent && agent.tenantId === tenantId ? agent : null;
    },
    async loadPublic(id) {
      const agent = await cache.get(id, () => readAgent(orm, id));
      return agent && agent.public && !agent.deletedAt ? agent : null;
    },
    async forget(id) {
      feed.invalidate(`agent:${id}`);
      await feed.publish();
    },
  };
}
