// The invocation rows as the API reads them: the tenant's list, a poll by id, and the public
// payer's poll key. Keyset paging on (created_at, id) follows the invocations_tenant_created
// index, so a page boundary never shifts when newer rows arrive; the door encodes the cursor.
import { InvocationSchema, type Invocation, type InvocationStatus } from '../db/entities.ts';
import type { GatewayDb } from '../db/orm.ts';

/** A list position: the page continues with rows older than this one. */
export type InvocationCursor = { at: Date; id: string };

export type InvocationFilter = {
  agentId?: string;
  status?: InvocationStatus;
  /** An A2A task's calls. */
  taskId?: string;
  /** The calls a budget refused. */
  budgetId?: string;
  /** One caller's calls: a token's user, or `x402:<checksummed address>` for a payer. */
  caller?: string;
  /** Created at or after / at or before. */
  since?: Date;
  until?: Date;
};

/** The tenant's rows, newest first, after the cursor: `limit` + 1 of them, the extra one saying another page exists. */
export function invocationsPage(
  db: GatewayDb,
  tenantId: string,
  filter: InvocationFilter,
  cursor: InvocationCursor | undefined,
  limit: number,
): Promise<Invocation[]> {
  const where: Record<string, unknown> = { tenantId };
  if (filter.agentId) where.agentId = filter.agentId;
  if (filter.status) where.status = filter.status;
  if (filter.taskId) where.a2aTaskId = filter.taskId;
  if (filter.budgetId) where.budgetId = filter.budgetId;
  // No index of its own: read along invocations_tenant_created, as the per-caller analytics do; one
  // more index on this table would cost every call's insert.
  if (filter.caller) where.caller = filter.caller;
  const created: Record<string, Date> = {};
  if (filter.since) created.$gte = filter.since;
  if (filter.until) created.$lte = filter.until;
  if (filter.since || filter.until) where.createdAt = created;
  const conditions: Record<string, unknown>[] = [where];
  if (cursor)
    conditions.push({ $or: [{ createdAt: { $lt: cursor.at } }, { createdAt: cursor.at, id: { $lt: cursor.id } }] });
  return db.em
    .fork()
    .find(
      InvocationSchema,
      { $and: conditions },
      { orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], limit: limit + 1 },
    );
}

/** The tenant's call through this agent, or null. */
export function agentInvocation(
  db: GatewayDb,
  tenantId: string,
  agentId: string,
  id: string,
): Promise<Invocation | null> {
  return db.em.fork().findOne(InvocationSchema, { id, tenantId, agentId });
}

/** A public call (paid by an x402 payer), or null. */
export function publicInvocation(db: GatewayDb, id: string): Promise<Invocation | null> {
  return db.em.fork().findOne(InvocationSchema, { id, callerKind: 'x402' });
}

/**
 * Replaces the poll key's hash of this payer's public call; false when the call is not one
 * (another payer's, a token caller's, none).
 */
export async function replacePollKey(
  db: GatewayDb,
  invocationId: string,
  payer: string,
  keySha256: string,
): Promise<boolean> {
  const updated = await db.em
    .getConnection()
    .execute(
      `update invocations set poll_key_sha256 = ? where id = ? and caller_kind = 'x402' and caller = ?`,
      [keySha256, invocationId, payer],
      'run',
    );
  return Boolean((updated as { affectedRows?: number }).affectedRows);
}
