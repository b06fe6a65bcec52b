// The policy store in PostgreSQL: the tenant's document with its version, and the decision
// log. Every proxied call reads the version (a primary-key lookup), which is what keeps every
// replica's cache honest and what makes an unreachable store fail the call (fail closed).
import type { MikroORM } from '@mikro-orm/postgresql';
import { newId } from '../ids.ts';
import type { PolicyDocument, PolicyAction } from './schema.ts';

export type PolicyVersion = { version: number; updatedAt: Date };

/** The probe's answer: the version always, the document only when it differs from the one known. */
export type PolicyProbe = PolicyVersion & { document: unknown | null };

export type DecisionRecord = {
  tenantId: string;
  agentId: string;
  protocol: string;
  mcpTool: string | null;
  action: PolicyAction;
  matchedRule: number | null;
  reason: string;
};

export type PolicyDecision = {
  id: string;
  agent_id: string;
  protocol: string;
  mcp_tool: string | null;
  action: PolicyAction;
  matched_rule: string;
  reason: string;
  created_at: string;
};

type Row = Record<string, unknown>;
const toDate = (epochMs: unknown) => new Date(Number(epochMs));

export type PolicyStore = ReturnType<typeof createPolicyStore>;

export function createPolicyStore(orm: MikroORM) {
  const sql = <T = Row>(query: string, params: unknown[] = []) => orm.em.getConnection().execute<T[]>(query, params);

  return {
    async probe(tenantId: string, knownVersion: number | null): Promise<PolicyProbe | null> {
      const rows = await sql(
        `select version, (extract(epoch from updated_at) * 1000)::bigint as updated_ms,
                case when version = ? then null else document end as document
         from policies where tenant_id = ?`,
        [knownVersion ?? 0, tenantId],
      );
      if (rows.length === 0) return null;
      return { version: Number(rows[0].version), updatedAt: toDate(rows[0].updated_ms), document: rows[0].document ?? null };
    },

    async get(tenantId: string): Promise<(PolicyVersion & { document: PolicyDocument }) | null> {
      const probe = await this.probe(tenantId, null);
      return probe ? { version: probe.version, updatedAt: probe.updatedAt, document: probe.document as PolicyDocument } : null;
    },

    /** Wholesale replace; the version goes up by exactly one per replace, atomically. */
    async replace(tenantId: string, document: PolicyDocument): Promise<PolicyVersion> {
      const rows = await sql(
        `insert into policies as p (tenant_id, version, document, updated_at) values (?, 1, ?::jsonb, clock_timestamp())
         on conflict (tenant_id) do update set version = p.version + 1, document = excluded.document, updated_at = excluded.updated_at
         returning version, (extract(epoch from updated_at) * 1000)::bigint as updated_ms`,
        [tenantId, JSON.stringify(document)],
      );
      return { version: Number(rows[0].version), updatedAt: toDate(rows[0].updated_ms) };
    },

    async recordDecision(d: DecisionRecord): Promise<string> {
      const id = newId('pdec');
      await sql(
        `insert into policy_decisions (id, tenant_id, agent_id, protocol, mcp_tool, action, matched_rule, reason, created_at)
         values (?, ?, ?, ?, ?, ?, ?, ?, clock_timestamp())`,
        [id, d.tenantId, d.agentId, d.protocol, d.mcpTool, d.action, d.matchedRule === null ? '' : String(d.matchedRule), d.reason],
      );
      return id;
    },

    async listDecisions(tenantId: string, limit: number): Promise<PolicyDecision[]> {
      const rows = await sql(
        `select id, agent_id, protocol, mcp_tool, action, matched_rule, reason, (extract(epoch from created_at) * 1000)::bigint as created_ms
         from policy_decisions where tenant_id = ? order by created_at desc, id desc limit ?`,
        [tenantId, limit],
      );
      return rows.map((r) => ({
        id: String(r.id),
        agent_id: String(r.agent_id),
        protocol: String(r.protocol),
        mcp_tool: (r.mcp_tool as string | null) ?? null,
        action: r.action as PolicyAction,
        matched_rule: String(r.matched_rule),
        reason: String(r.reason),
        created_at: toDate(r.created_ms).toISOString(),
      }));
    },
  };
}
