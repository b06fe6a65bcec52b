// The policy store in PostgreSQL: the tenant's document with its version, and the decision
// log. The current document of each tenant (or its absence) is cached per process and kept
// honest by the change feed (gateway/db/change-feed.ts): a replace on any replica notifies in its
// transaction and drops the entry everywhere, so the next call reads the new version. Fail
// closed: while the feed is down (or before it is up) every call reads the database, so an
// unreachable store fails the call; a schema change to the table (the store taken away)
// empties the cache too.
import type { MikroORM } from '@mikro-orm/postgresql';
import { newId } from '../../lib/ids.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { createFeedCache } from '../db/feed-cache.ts';
import type { PolicyDocument, PolicyAction } from './schema.ts';

export type PolicyVersion = { version: number; updatedAt: Date };

/** A tenant's current policy as stored (the document is validated when evaluated). */
export type CurrentPolicy = PolicyVersion & { document: unknown };

export type DecisionRecord = {
  tenantId: string;
  agentId: string;
  protocol: string;
  mcpTool: string | null;
  action: PolicyAction;
  matchedRule: number | null;
  reason: string;
  /** The invocation the call was given; null for a denied call (it never becomes one). */
  invocationId: string | null;
};

export type PolicyDecision = {
  id: string;
  agent_id: string;
  protocol: string;
  mcp_tool: string | null;
  action: PolicyAction;
  matched_rule: string;
  reason: string;
  invocation_id: string | null;
  created_at: string;
};

/** The decisions page: newest first, at most `limit`, created within [since, until] when given. */
export type DecisionQuery = { limit: number; since?: Date; until?: Date };

type Row = Record<string, unknown>;
const toDate = (epochMs: unknown) => new Date(Number(epochMs));

export type PolicyStore = ReturnType<typeof createPolicyStore>;

/** The INSERT of one decision, also run inside another statement (the proxy's accept commit). */
export function decisionInsertSql(d: DecisionRecord): { id: string; sql: string; params: unknown[] } {
  const id = newId('pdec');
  return {
    id,
    sql: `insert into policy_decisions (id, tenant_id, agent_id, protocol, mcp_tool, action, matched_rule, reason, invocation_id, created_at)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, clock_timestamp())`,
    params: [
      id,
      d.tenantId,
      d.agentId,
      d.protocol,
      d.mcpTool,
      d.action,
      d.matchedRule === null ? '' : String(d.matchedRule),
      d.reason,
      d.invocationId,
    ],
  };
}

/** One per policy engine (one per app), over the process's change feed. */
export function createPolicyStore(orm: MikroORM, feed: ChangeFeed) {
  const sql = <T = Row>(query: string, params: unknown[] = []) => orm.em.getConnection().execute<T[]>(query, params);
  const cache = createFeedCache<CurrentPolicy | null>(feed, {
    keyOf: (key) => (key.startsWith('policy:') ? key.slice('policy:'.length) : null),
  });

  async function read(tenantId: string): Promise<CurrentPolicy | null> {
    const rows = await sql(
      `select version, (extract(epoch from updated_at) * 1000)::bigint as updated_ms, document from policies where tenant_id = ?`,
      [tenantId],
    );
    // A removed policy keeps its row (and version count) with no document: the tenant has none.
    if (rows.length === 0 || rows[0].document === null) return null;
    return {
      version: Number(rows[0].version),
      updatedAt: toDate(rows[0].updated_ms),
      document: rows[0].document ?? null,
    };
  }

  return {
    /** The tenant's policy from the feed-kept cache (read on a miss); null when the tenant has none. */
    current(tenantId: string): Promise<CurrentPolicy | null> {
      return cache.get(tenantId, () => read(tenantId));
    },

    /** The tenant's policy as of now (GET /v1/policy); the proxy's reads are made fresh by its gate. */
    async get(tenantId: string): Promise<(PolicyVersion & { document: PolicyDocument }) | null> {
      await feed.sync();
      const current = await this.current(tenantId);
      return current
        ? { version: current.version, updatedAt: current.updatedAt, document: current.document as PolicyDocument }
        : null;
    },

    /** Wholesale replace; the version goes up by exactly one per replace, atomically. */
    async replace(tenantId: string, document: PolicyDocument): Promise<PolicyVersion> {
      const rows = await sql(
        `insert into policies as p (tenant_id, version, document, updated_at) values (?, 1, ?::jsonb, clock_timestamp())
         on conflict (tenant_id) do update set version = p.version + 1, document = excluded.document, updated_at = excluded.updated_at
         returning version, (extract(epoch from updated_at) * 1000)::bigint as updated_ms`,
        [tenantId, JSON.stringify(document)],
      );
      // In force here at once; answered once every replica has applied it (ChangeFeed.publish).
      feed.invalidate(`policy:${tenantId}`);
      await feed.publish();
      return { version: Number(rows[0].version), updatedAt: toDate(rows[0].updated_ms) };
    },

    /**
     * Back to no policy (DELETE /v1/policy); false when the tenant had none. The row stays as a
     * tombstone, so versions keep counting up across a removal and a new replace.
     */
    async remove(tenantId: string): Promise<boolean> {
      const rows = await sql(
        `update policies set document = null, version = version + 1, updated_at = clock_timestamp()
         where tenant_id = ? and document is not null returning version`,
        [tenantId],
      );
      if (rows.length === 0) return false;
      feed.invalidate(`policy:${tenantId}`);
      await feed.publish();
      return true;
    },

    async recordDecision(d: DecisionRecord): Promise<string> {
      const insert = decisionInsertSql(d);
      await sql(insert.sql, insert.params);
      return insert.id;
    },

    async listDecisions(tenantId: string, { limit, since, until }: DecisionQuery): Promise<PolicyDecision[]> {
      const rows = await sql(
        // Times are shown to the millisecond (floored), so `until` takes in its whole millisecond.
        `select id, agent_id, protocol, mcp_tool, action, matched_rule, reason, invocation_id, floor(extract(epoch from created_at) * 1000)::bigint as created_ms
         from policy_decisions where tenant_id = ? and created_at >= coalesce(?::timestamptz, '-infinity')
         and created_at < coalesce(?::timestamptz + interval '1 millisecond', 'infinity') order by created_at desc, id desc limit ?`,
        [tenantId, since ?? null, until ?? null, limit],
      );
      return rows.map((r) => ({
        id: String(r.id),
        agent_id: String(r.agent_id),
        protocol: String(r.protocol),
        mcp_tool: (r.mcp_tool as string | null) ?? null,
        action: r.action as PolicyAction,
        matched_rule: String(r.matched_rule),
        reason: String(r.reason),
        invocation_id: (r.invocation_id as string | null) ?? null,
        created_at: toDate(r.created_ms).toISOString(),
      }));
    },
  };
}
