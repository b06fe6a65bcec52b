// The proxy reads its agent on every call. A plain primary-key read mapped by hand costs a
// fraction of MikroORM's query building and hydration at proxy rates (bench:proxy); the
// Agent type makes a column the entity gains and this mapping misses a type error.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Agent, Pricing } from '../db/entities.ts';

type Row = Record<string, unknown>;

const json = <T>(value: unknown): T => (typeof value === 'string' ? (JSON.parse(value) as T) : (value as T));
const date = (value: unknown): Date => (value instanceof Date ? value : new Date(String(value)));
const nullableNumber = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));

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

export async function loadAgent(orm: MikroORM, tenantId: string, id: string): Promise<Agent | null> {
  const rows = await orm.em.getConnection().execute<Row[]>('select * from agents where id = ? and tenant_id = ?', [id, tenantId]);
  return rows[0] ? agentFromRow(rows[0]) : null;
}
