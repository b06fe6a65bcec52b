// GET /v1/analytics and /v1/analytics/callers parameters (docs/API.md "Analytics"): group_by agent_id only, bucket hour or
// day (default hour), since required, until default now, both RFC 3339, since ≤ until, and a
// window of at most 31 days (since/until read by api/query-time.ts). Anything else is a 400.
// The zod schema is the document's; the two rules across parameters are in its descriptions.
import { z } from 'zod';
import { badRequest } from '../errors.ts';
import { SINCE_AFTER_UNTIL, timeWindow } from '../query-time.ts';
import { instantParam, parseQuery } from '../validation.ts';
import type { AnalyticsQuery } from '../../gateway/analytics/query.ts';
import { MAX_CALLER_GROUPS, type CallerQuery } from '../../gateway/analytics/callers.ts';

export type { AnalyticsQuery };

const MAX_WINDOW_DAYS = 31;
const MAX_WINDOW_MS = MAX_WINDOW_DAYS * 24 * 3600 * 1000;

export const AnalyticsParams = z.object({
  group_by: z.enum(['agent_id'], { error: 'group_by must be agent_id' }).optional(),
  bucket: z.enum(['hour', 'day'], { error: 'bucket must be hour or day' }).default('hour'),
  since: instantParam('since', 'Buckets of invocations created at or after this RFC 3339 instant.'),
  until: instantParam(
    'until',
    `Up to this RFC 3339 instant, default now. Not before since, and at most ${MAX_WINDOW_DAYS} days after it (else 400).`,
  ).optional(),
});

/** since/until as the window both analytics endpoints take: since ≤ until (default now), at most 31 days. */
function windowOf(params: { since: string; until?: string }, now: Date): { since: Date; until: Date } {
  const window = timeWindow(params);
  const since = window.since!;
  const until = window.until ?? now;
  if (since.getTime() > until.getTime()) throw badRequest(SINCE_AFTER_UNTIL);
  if (until.getTime() - since.getTime() > MAX_WINDOW_MS)
    throw badRequest(`the window must not exceed ${MAX_WINDOW_DAYS} days`);
  return { since, until };
}

export function parseAnalyticsQuery(
  query: Record<string, string | string[] | undefined>,
  now = new Date(),
): AnalyticsQuery {
  const params = parseQuery(AnalyticsParams, query);
  return { bucket: params.bucket, ...windowOf(params, now) };
}

/** GET /v1/analytics/callers: the same window and bucket, optionally one agent or one kind of caller. */
export const CallerAnalyticsParams = AnalyticsParams.omit({ group_by: true }).extend({
  agent_id: z.string().min(1).max(200).optional().meta({ description: 'Only this agent.' }),
  caller_kind: z
    .enum(['token', 'x402'], { error: 'caller_kind must be token or x402' })
    .optional()
    .meta({ description: 'Only callers with a token (token) or only payers of public agents (x402).' }),
});

export function parseCallerAnalyticsQuery(
  query: Record<string, string | string[] | undefined>,
  now = new Date(),
): CallerQuery {
  const params = parseQuery(CallerAnalyticsParams, query);
  return {
    bucket: params.bucket,
    ...windowOf(params, now),
    ...(params.agent_id === undefined ? {} : { agentId: params.agent_id }),
    ...(params.caller_kind === undefined ? {} : { callerKind: params.caller_kind }),
  };
}

const Percentiles = z.strictObject({
  p50: z.number().nullable(),
  p95: z.number().nullable(),
  p99: z.number().nullable(),
});
const at = z.iso.datetime({ offset: true });

/** What both endpoints answer: the window, the bucket size, and per group its figures. */
const window = { range: z.strictObject({ since: at, until: at }), bucket: z.enum(['hour', 'day']) };
const figures = {
  agent_id: z.string(),
  bucket_start: at,
  count: z.int(),
  error_rate: z.number().min(0).max(1),
  by_error_class: z.record(z.string(), z.int()),
};

const amount = z.string().regex(/^[0-9]+$/);
const Charges = { count: z.int(), amount };

/** Beside the v1 contract's figures (additive): what the group's paid calls brought. */
const Revenue = z
  .strictObject({
    count: z.int().meta({
      description: 'Completed paid calls whose call reached the upstream (any x402 scheme).',
    }),
    amount: amount.meta({
      description:
        "The sum of their charges, in the asset's smallest unit (decimal string): a metered call's charge as measured, never the maximum the payer signed.",
    }),
    uncollected: z
      .strictObject({
        ...Charges,
        by_reason: z.record(z.string(), z.strictObject(Charges)).meta({
          description:
            "By reason: the settlement's error for a charge that failed to settle (e.g. payer_balance_short), or `unconfigured` (the tenant has no settlement configured).",
        }),
      })
      .meta({ description: 'The charges among those that were not collected: count and amount, by reason.' }),
  })
  .meta({
    description:
      'Revenue of the paid calls. Rollups are folded from the invocation rows in the background and may lag them by a few seconds.',
  });

export const AnalyticsResult = z
  .strictObject({
    ...window,
    groups: z.array(z.strictObject({ ...figures, latency_ms: Percentiles, ttft_ms: Percentiles, revenue: Revenue })),
  })
  .meta({ id: 'AnalyticsResult' });

export const CallerAnalyticsResult = z
  .strictObject({
    ...window,
    groups: z.array(
      z.strictObject({
        user_id: z.string().meta({ description: "The caller: the token's user, or x402:<address> for a payer." }),
        caller_kind: z.enum(['token', 'x402']),
        ...figures,
      }),
    ),
    truncated: z.boolean().meta({ description: `More than ${MAX_CALLER_GROUPS} groups: the first ones only.` }),
  })
  .meta({ id: 'CallerAnalyticsResult' });
