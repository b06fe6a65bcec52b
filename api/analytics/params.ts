// GET /v1/analytics parameters (docs/API.md "Analytics"): group_by agent_id only, bucket hour or
// day (default hour), since required, until default now, both RFC 3339, since ≤ until, and a
// window of at most 31 days (since/until read by api/query-time.ts). Anything else is a 400.
// The zod schema is the document's; the two rules across parameters are in its descriptions.
import { z } from 'zod';
import { badRequest } from '../errors.ts';
import { SINCE_AFTER_UNTIL, timeWindow } from '../query-time.ts';
import { instantParam, parseQuery } from '../validation.ts';
import type { AnalyticsQuery } from '../../gateway/analytics/query.ts';

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

export function parseAnalyticsQuery(
  query: Record<string, string | string[] | undefined>,
  now = new Date(),
): AnalyticsQuery {
  const params = parseQuery(AnalyticsParams, query);
  const window = timeWindow(params);
  const since = window.since!;
  const until = window.until ?? now;
  if (since.getTime() > until.getTime()) throw badRequest(SINCE_AFTER_UNTIL);
  if (until.getTime() - since.getTime() > MAX_WINDOW_MS)
    throw badRequest(`the window must not exceed ${MAX_WINDOW_DAYS} days`);
  return { bucket: params.bucket, since, until };
}

const Percentiles = z.strictObject({
  p50: z.number().nullable(),
  p95: z.number().nullable(),
  p99: z.number().nullable(),
});
const at = z.iso.datetime({ offset: true });

export const AnalyticsResult = z
  .strictObject({
    range: z.strictObject({ since: at, until: at }),
    bucket: z.enum(['hour', 'day']),
    groups: z.array(
      z.strictObject({
        agent_id: z.string(),
        bucket_start: at,
        count: z.int(),
        error_rate: z.number().min(0).max(1),
        by_error_class: z.record(z.string(), z.int()),
        latency_ms: Percentiles,
        ttft_ms: Percentiles,
      }),
    ),
  })
  .meta({ id: 'AnalyticsResult' });
