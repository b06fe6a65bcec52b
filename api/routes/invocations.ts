// GET /v1/invocations: the tenant's invocation records, newest first, as `{data, next_cursor}`.
// Filters: agent_id, status, since, until (RFC 3339, inclusive; api/query-time.ts), limit (1–100, default 20;
// out-of-range values are clamped), cursor (opaque, from the previous page's next_cursor).
// Keyset paging on (created_at, id) follows the invocations_tenant_created index, so a page
// boundary never shifts when newer rows arrive. Bodies are never listed.
import Router from '@koa/router';
import { InvocationSchema } from '../../gateway/db/entities.ts';
import { badRequest } from '../errors.ts';
import { inTimestampRange, timeWindow } from '../query-time.ts';
import { isId } from '../../lib/ids.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const STATUSES = new Set(['pending', 'running', 'succeeded', 'failed']);
const DEFAULT_INVOCATION_LIMIT = 20;
const MAX_INVOCATION_LIMIT = 100;

type Cursor = { at: Date; id: string };

function one(query: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = query[name];
  if (Array.isArray(value)) throw badRequest(`${name} may be given once`);
  return value === '' ? undefined : value;
}

function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify([c.at.toISOString(), c.id])).toString('base64url');
}

function decodeCursor(value: string): Cursor {
  try {
    const [at, id] = JSON.parse(Buffer.from(value, 'base64url').toString('utf8')) as [unknown, unknown];
    // A caller can write any cursor: its instant is bounded as a since/until would be.
    const date = new Date(typeof at === 'string' ? at : NaN);
    if (typeof id === 'string' && isId('inv', id) && inTimestampRange(date)) return { at: date, id };
  } catch {
    // fall through to the one answer for every malformed cursor
  }
  throw badRequest('invalid cursor');
}

export function invocationRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();

  router.get('/invocations', async (ctx) => {
    const query = ctx.query;
    const agentId = one(query, 'agent_id');
    const status = one(query, 'status');
    const { since, until } = timeWindow(query);
    const rawLimit = one(query, 'limit');
    const rawCursor = one(query, 'cursor');

    if (agentId !== undefined && !isId('agt', agentId)) throw badRequest('invalid agent_id');
    if (status !== undefined && !STATUSES.has(status))
      throw badRequest('status must be pending, running, succeeded or failed');
    let limit = DEFAULT_INVOCATION_LIMIT;
    if (rawLimit !== undefined) {
      if (!/^-?\d{1,9}$/.test(rawLimit)) throw badRequest('limit must be an integer');
      limit = Math.min(MAX_INVOCATION_LIMIT, Math.max(1, Number(rawLimit)));
    }
    const cursor = rawCursor !== undefined ? decodeCursor(rawCursor) : undefined;

    const where: Record<string, unknown> = { tenantId: ctx.state.caller.tenantId };
    if (agentId) where.agentId = agentId;
    if (status) where.status = status;
    const created: Record<string, Date> = {};
    if (since) created.$gte = since;
    if (until) created.$lte = until;
    if (since || until) where.createdAt = created;
    const conditions: Record<string, unknown>[] = [where];
    if (cursor)
      conditions.push({ $or: [{ createdAt: { $lt: cursor.at } }, { createdAt: cursor.at, id: { $lt: cursor.id } }] });

    const rows = await deps.orm.em
      .fork()
      .find(
        InvocationSchema,
        { $and: conditions },
        { orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], limit: limit + 1 },
      );
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    ctx.body = {
      data: page.map((row) => serializeInvocation(row)),
      next_cursor: rows.length > limit && last ? encodeCursor({ at: last.createdAt, id: last.id }) : null,
    };
  });

  return router;
}
