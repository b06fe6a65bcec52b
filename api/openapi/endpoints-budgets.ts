// The budget operations (docs/API.md "Budgets"): the zod schemas each route parses with and the
// statuses it answers. Fields are described on the schemas.
import {
  BudgetCreateInput,
  BudgetList,
  BudgetListQuery,
  BudgetPath,
  BudgetUpdateInput,
  BudgetView,
} from '../budgets/schema.ts';
import { err, notFound, type Operation } from './responses.ts';

const ENFORCED =
  'Enforced at admission of every call (both /v1 endpoints, public agents, MCP, A2A, virtual MCP servers), before any payment is verified, bound or settled: a call that would take a hard budget past its limit is a 429 `{"error": "budget exceeded", "budget_id"}`.';

export const budgetOperations: Operation[] = [
  {
    method: 'post',
    path: '/v1/budgets',
    operationId: 'createBudget',
    tag: 'Budgets',
    summary: 'Create a budget',
    auth: true,
    description: `${ENFORCED} The answer that creates the tenant's first budget with alerts carries \`alert_secret\`, the key its alerts are signed with, once.`,
    body: { schema: BudgetCreateInput, required: true },
    responses: {
      201: { description: 'The budget, its current window empty or already in use.', body: BudgetView },
      400: err('Invalid body, or a webhook_url the SSRF guard refuses.'),
      409: err('The name is taken in the tenant.'),
    },
  },
  {
    method: 'get',
    path: '/v1/budgets',
    operationId: 'listBudgets',
    tag: 'Budgets',
    summary: 'List budgets',
    auth: true,
    params: { query: BudgetListQuery },
    responses: {
      200: { description: 'A page of budgets, each with its current window.', body: BudgetList },
      400: err('Invalid limit or cursor; a parameter given twice.'),
    },
  },
  {
    method: 'get',
    path: '/v1/budgets/{id}',
    operationId: 'getBudget',
    tag: 'Budgets',
    summary: 'Get a budget',
    auth: true,
    params: { path: BudgetPath },
    responses: {
      200: { description: 'The budget with its current window.', body: BudgetView },
      404: notFound('budget'),
    },
  },
  {
    method: 'patch',
    path: '/v1/budgets/{id}',
    operationId: 'updateBudget',
    tag: 'Budgets',
    summary: 'Update a budget',
    auth: true,
    params: { path: BudgetPath },
    body: { schema: BudgetUpdateInput, required: false },
    responses: {
      200: { description: 'The updated budget.', body: BudgetView },
      400: err('Invalid body, or a webhook_url the SSRF guard refuses.'),
      404: notFound('budget'),
      409: err('The new name is taken in the tenant.'),
    },
  },
  {
    method: 'delete',
    path: '/v1/budgets/{id}',
    operationId: 'deleteBudget',
    tag: 'Budgets',
    summary: 'Delete a budget',
    auth: true,
    params: { path: BudgetPath },
    responses: {
      204: { description: 'Deleted; calls are no longer counted against it.' },
      404: notFound('budget'),
    },
  },
];
