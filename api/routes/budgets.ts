// /v1/budgets: the tenant's budgets (gateway/budgets/management.ts holds the rules that need the
// database; this maps the bodies to them and shows each with its current window's use). The
// enforcement is admission's (api/admission/stages/budget.ts).
import Router from '@koa/router';
import { badRequest } from '../errors.ts';
import { parseOr400, parseQuery } from '../validation.ts';
import { pageOf } from '../pagination.ts';
import { upstreamUrlProblem } from '../upstream-url.ts';
import { BudgetCreateInput, BudgetListQuery, BudgetUpdateInput } from '../budgets/schema.ts';
import { serializeBudgets } from '../budgets/serialize.ts';
import { createBudgetManagement, type BudgetAlerts, type BudgetLimit } from '../../gateway/budgets/management.ts';
import type { Budget } from '../../gateway/budgets/entity.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

type AlertsInput = BudgetCreateInput['alerts'];

export function budgetRoutes(deps: AppDeps, services: Pick<ProxyParts, 'budgets'>): Router<AuthState> {
  const router = new Router<AuthState>();
  const budgets = createBudgetManagement(deps.orm, deps.feed, deps.config.vault.keyring);
  const { ledger } = services.budgets;
  const one = async (row: Budget, secret: string | null = null) => {
    const [view] = await serializeBudgets(ledger, [row]);
    return secret ? { ...view, alert_secret: secret } : view;
  };
  /** A webhook_url the SSRF guard refuses on its face is a 400, as an agent's upstream_url is. */
  const alertsOf = (alerts: AlertsInput): BudgetAlerts | null => {
    if (!alerts) return null;
    const problem = upstreamUrlProblem('alerts.webhook_url', alerts.webhook_url, deps.config.upstream);
    if (problem) throw badRequest(problem);
    return { thresholds: alerts.thresholds, webhookUrl: alerts.webhook_url };
  };
  const limitOf = (limit: BudgetCreateInput['limit']): BudgetLimit => ({
    amount: limit.amount ?? null,
    calls: limit.calls ?? null,
  });

  router.post('/budgets', async (ctx) => {
    const input = parseOr400(BudgetCreateInput, ctx.request.body);
    const { tenantId, userId } = ctx.state.caller;
    const { row, secret } = await budgets.create(tenantId, userId, {
      name: input.name,
      scope: input.scope ?? {},
      limit: limitOf(input.limit),
      window: input.window,
      mode: input.mode,
      alerts: alertsOf(input.alerts),
    });
    ctx.status = 201;
    ctx.body = await one(row, secret);
  });

  router.get('/budgets', async (ctx) => {
    const page = pageOf(parseQuery(BudgetListQuery, ctx.query), 'bud');
    const listed = await budgets.list(ctx.state.caller.tenantId, page, (row) => row);
    ctx.body = { data: await serializeBudgets(ledger, listed.data), next_cursor: listed.next_cursor };
  });

  router.get('/budgets/:id', async (ctx) => {
    ctx.body = await one(await budgets.get(ctx.state.caller.tenantId, ctx.params.id));
  });

  router.patch('/budgets/:id', async (ctx) => {
    // The body is read once the budget is found: a missing one is a 404 whatever it sent.
    const { row, secret } = await budgets.update(ctx.state.caller.tenantId, ctx.params.id, () => {
      const patch = parseOr400(BudgetUpdateInput, ctx.request.body);
      return {
        name: patch.name,
        scope: patch.scope,
        limit: patch.limit ? limitOf(patch.limit) : undefined,
        window: patch.window,
        mode: patch.mode,
        alerts: patch.alerts === undefined ? undefined : alertsOf(patch.alerts),
        touched: Object.keys(patch).length > 0,
      };
    });
    ctx.body = await one(row, secret);
  });

  router.delete('/budgets/:id', async (ctx) => {
    await budgets.remove(ctx.state.caller.tenantId, ctx.params.id);
    ctx.status = 204;
  });

  return router;
}
