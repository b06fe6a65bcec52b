// Budget request and response bodies (zod); the OpenAPI document is generated from these. The
// rules that need the database or the deployment (a webhook_url the SSRF guard refuses, a name
// taken) are checked by the route and the domain (gateway/budgets/management.ts).
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';
import { idField, idParam, maxChars, nameField, NO_NUL } from '../validation.ts';
import { WINDOWS } from '../../gateway/budgets/windows.ts';

/**
 * At most 15 digits (below 10^15, which the ledger's Lua numbers hold exactly: 2^53 > 10^15),
 * written without leading zeros: the pattern is the whole rule, as the document states it.
 */
const Amount = z
  .string({ error: 'limit.amount must be a string of digits' })
  .regex(/^[1-9][0-9]{0,14}$/, 'limit.amount must be a whole number from 1 to 999999999999999, in digits')
  .meta({
    description:
      "What the window's priced calls may be charged, in the asset's smallest unit (USDC: millionths), a decimal string from 1 to 999999999999999.",
  });

const Calls = z
  .int({ error: 'limit.calls must be an integer' })
  .min(1, 'limit.calls must be at least 1')
  .max(Number.MAX_SAFE_INTEGER, 'limit.calls is too large')
  .meta({ description: 'How many calls (priced or not) the window admits.' });

const Limit = z
  .strictObject({ amount: Amount.optional(), calls: Calls.optional() })
  .refine((l) => l.amount !== undefined || l.calls !== undefined, 'limit must set amount, calls or both')
  .meta({ description: 'At least one of `amount` and `calls`; a call must fit both.', minProperties: 1 });

const Scope = z
  .strictObject({
    agent_id: idField('agt', 'scope.agent_id must be an agent id (agt_<uuidv7>)').optional(),
    user: maxChars(
      z.string({ error: 'scope.user must be a string' }).min(1, 'scope.user must not be empty'),
      256,
      'scope.user is too long',
    )
      .regex(NO_NUL, 'scope.user must not contain NUL characters')
      .optional()
      .meta({ description: "The caller: a token's subject (`sub`), or a public call's `x402:<payer address>`." }),
    payer: z
      .string({ error: 'scope.payer must be a string' })
      .regex(/^0x[0-9a-fA-F]{40}$/, 'scope.payer must be an address (0x and 40 hex digits)')
      .optional()
      .meta({ description: 'The address paying the call (any case); public calls included.' }),
  })
  .meta({
    description:
      'Every field given must match the call (as policy matches do); an empty scope counts every call of the tenant.',
  });

const Window = z.enum(WINDOWS, { error: `window must be one of ${WINDOWS.join(', ')}` }).meta({
  description: 'A calendar hour, day, ISO week (from Monday) or month in UTC, or `total` (from creation, never reset).',
});

const Mode = z
  .enum(['hard', 'soft'], { error: 'mode must be hard or soft' })
  .meta({ description: '`hard` refuses a call past the limit (429); `soft` never refuses, it alerts only.' });

const Alerts = z
  .strictObject({
    thresholds: z
      .array(
        z
          .number({ error: 'alerts.thresholds entries must be numbers' })
          .gt(0, 'alerts.thresholds entries must be above 0')
          .lte(1, 'alerts.thresholds entries must be at most 1'),
        { error: 'alerts.thresholds must be an array of numbers' },
      )
      .min(1, 'alerts.thresholds must not be empty')
      .max(10, 'alerts.thresholds holds at most 10 entries')
      .refine((ts) => new Set(ts).size === ts.length, 'alerts.thresholds entries must be distinct')
      .meta({ description: 'Shares of the limit (0 < t ≤ 1); one alert per threshold per window.', uniqueItems: true }),
    webhook_url: maxChars(
      z.string({ error: 'alerts.webhook_url must be a string' }),
      2048,
      'alerts.webhook_url is too long',
    ).meta({
      description:
        'Where alerts are POSTed (http or https; the same SSRF rules as upstreams): signed JSON, docs/API.md "Budgets".',
    }),
  })
  .meta({ description: 'Alerts when the window crosses each threshold.' });

export const BudgetCreateInput = z
  .strictObject({
    name: nameField('name must not be empty'),
    scope: Scope.optional(),
    limit: Limit,
    window: Window,
    mode: Mode,
    alerts: Alerts.nullable().optional(),
  })
  .meta({ id: 'BudgetCreate', description: 'A cap on what matching calls spend or how many are admitted per window.' });
export type BudgetCreateInput = z.infer<typeof BudgetCreateInput>;

export const BudgetUpdateInput = z
  .strictObject({
    name: nameField('name must not be empty').optional(),
    scope: Scope.optional().meta({ description: 'Replaces the whole scope.' }),
    limit: Limit.optional().meta({ description: 'Replaces the whole limit.' }),
    window: Window.optional(),
    mode: Mode.optional(),
    alerts: Alerts.nullable().optional().meta({ description: 'null removes the alerts.' }),
  })
  .meta({
    id: 'BudgetUpdate',
    description:
      'Every key is optional; an absent key leaves its value unchanged. The current window keeps what it used (a new `window` starts counting in its own).',
  });
export type BudgetUpdateInput = z.infer<typeof BudgetUpdateInput>;

const Usage = z.strictObject({ amount: z.string(), calls: z.int() });

export const BudgetView = z
  .strictObject({
    id: z.string().regex(/^bud_/),
    tenant_id: z.string(),
    name: z.string(),
    scope: z.strictObject({
      agent_id: z.string().optional(),
      user: z.string().optional(),
      payer: z.string().optional(),
    }),
    limit: z.strictObject({ amount: z.string().nullable(), calls: z.int().nullable() }),
    window: z.enum(WINDOWS),
    mode: z.enum(['hard', 'soft']),
    alerts: z.strictObject({ thresholds: z.array(z.number()), webhook_url: z.string() }).nullable(),
    used: Usage.meta({
      description: "The current window's use, calls in flight included (reserved at their maximum).",
    }),
    remaining: z
      .strictObject({ amount: z.string().nullable(), calls: z.int().nullable() })
      .meta({ description: 'What the current window still admits (never below 0); null for a field without a limit.' }),
    window_start: z.iso.datetime({ offset: true }),
    resets_at: z.iso.datetime({ offset: true }).nullable().meta({ description: 'null for `total`.' }),
    alert_secret: z.string().optional().meta({
      description:
        "The tenant's alert-signing secret: in the answer that created the tenant's first alerting budget only, never again.",
    }),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Budget' });

export const BudgetList = z
  .strictObject({ data: z.array(BudgetView), next_cursor: z.string().nullable() })
  .meta({ id: 'BudgetList' });

export const BudgetListQuery = z.object(PageQuery);

export const BudgetPath = z.object({ id: idParam('bud', 'budget') });
