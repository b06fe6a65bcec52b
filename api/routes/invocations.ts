// GET /v1/invocations: the tenant's invocation records, newest first, as `{data, next_cursor}`.
// Filters: agent_id, task_id (an A2A task's calls), budget_id (the calls a budget refused),
// caller (a token's user or x402:<payer>), status, since, until (RFC 3339, inclusive; api/query-time.ts), limit (1–100, default 20;
// out-of-range values are clamped), cursor (opaque, from the previous page's next_cursor); their
// schema is api/invocations/schema.ts, which the document is generated from.
// Keyset paging on (created_at, id) (gateway/invocations/reads.ts); the cursor is opaque to the
// caller and parsed here. Bodies are never listed.
import Router from '@koa/router';
import type { z } from 'zod';
import { invocationsPage, type InvocationCursor } from '../../gateway/invocations/reads.ts';
import { badRequest } from '../errors.ts';
import { inTimestampRange, timeWindow } from '../query-time.ts';
import { clampLimit } from '../pagination.ts';
import { parseQuery } from '../validation.ts';
import { InvocationListQuery, type InvocationList } from '../invocations/schema.ts';
import { isId } from '../../lib/ids.ts';
import { getAddress } from 'ethers';
import { serializeInvocation } from '../proxy/serialize.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

function encodeCursor(c: InvocationCursor): string {
  return Buffer.from(JSON.stringify([c.at.toISOString(), c.id])).toString('base64url');
}

/** A payer is recorded as `x402:<checksummed address>`: an address in any letter case names it. */
function callerOf(value: string | undefined): string | undefined {
  const payer = value && /^x402:(0x[0-9a-fA-F]{40})$/.exec(value);
  return payer ? `x402:${getAddress(payer[1].toLowerCase())}` : value;
}

function decodeCursor(value: string): InvocationCursor {
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
    const query = parseQuery(InvocationListQuery, ctx.query);
    const { agent_id: agentId, status } = query;
    const { since, until } = timeWindow(query);
    const limit = clampLimit(query.limit);
    const cursor = query.cursor !== undefined ? decodeCursor(query.cursor) : undefined;

    const rows = await invocationsPage(
      deps.orm,
      ctx.state.caller.tenantId,
      {
        agentId,
        status,
        taskId: query.task_id,
        budgetId: query.budget_id,
        caller: callerOf(query.caller),
        since,
        until,
      },
      cursor,
      limit,
    );
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const body: z.infer<typeof InvocationList> = {
      data: page.map((row) => serializeInvocation(row)),
      next_cursor: rows.length > limit && last ? encodeCursor({ at: last.createdAt, id: last.id }) : null,
    };
    ctx.body = body;
  });

  return router;
}
