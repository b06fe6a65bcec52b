// /v1/policy: the tenant's policy document (wholesale replace, read back with its version,
// removed to return to "no policy") and the decisions its evaluations recorded.
import Router from '@koa/router';
import { badRequest, notFound } from '../errors.ts';
import { PolicyDocument, describePolicyIssue } from '../../gateway/policy/schema.ts';
import { parseQuery, rejectNul } from '../validation.ts';
import { DecisionsQuery } from '../policy/schema.ts';
import { timeWindow } from '../query-time.ts';
import type { PolicyEngine } from '../../gateway/policy/engine.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const DECISIONS_DEFAULT_LIMIT = 20;
const DECISIONS_MAX_LIMIT = 100;

/** `limit` is clamped, never refused: absent or unreadable gives the default. */
function decisionsLimit(raw: unknown): number {
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
  if (!Number.isFinite(value)) return DECISIONS_DEFAULT_LIMIT;
  return Math.min(DECISIONS_MAX_LIMIT, Math.max(1, Math.trunc(value)));
}

export function policyRoutes(deps: AppDeps, policy: PolicyEngine): Router<AuthState> {
  const router = new Router<AuthState>();
  const engine = () => policy;

  router.put('/policy', async (ctx) => {
    rejectNul(ctx.request.body);
    const parsed = PolicyDocument.safeParse(ctx.request.body);
    if (!parsed.success) throw badRequest(describePolicyIssue(parsed.error, ctx.request.body));
    const saved = await engine().store.replace(ctx.state.caller.tenantId, parsed.data);
    ctx.body = { version: saved.version, updated_at: saved.updatedAt.toISOString() };
  });

  router.get('/policy', async (ctx) => {
    const current = await engine().store.get(ctx.state.caller.tenantId);
    if (!current) throw notFound('no policy');
    ctx.body = { ...current.document, version: current.version, updated_at: current.updatedAt.toISOString() };
  });

  // Back to no policy: calls pass unchanged and no decision is recorded (an addition to the v1 contract).
  router.delete('/policy', async (ctx) => {
    if (!(await engine().store.remove(ctx.state.caller.tenantId))) throw notFound('no policy');
    ctx.status = 204;
  });

  router.get('/policy/decisions', async (ctx) => {
    const query = parseQuery(DecisionsQuery, ctx.query);
    const limit = decisionsLimit(query.limit);
    const { since, until } = timeWindow(query);
    ctx.body = {
      data: await engine().store.listDecisions(ctx.state.caller.tenantId, { limit, since, until }),
      limit,
    };
  });

  return router;
}
