// GET /v1/analytics parameters (docs/API.md "Analytics"): group_by agent_id only, bucket hour or
// day (default hour), since required, until default now, both RFC 3339, since ≤ until, and a
// window of at most 31 days (since/until read by api/query-time.ts). Anything else is a 400.
import { badRequest } from '../errors.ts';
import { SINCE_AFTER_UNTIL, timeWindow } from '../query-time.ts';
import type { AnalyticsQuery } from '../../gateway/analytics/query.ts';

export type { AnalyticsQuery };

const MAX_WINDOW_MS = 31 * 24 * 3600 * 1000;

function single(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw badRequest(`${name} must be given once`);
  return value;
}

export function parseAnalyticsQuery(query: Record<string, unknown>, now = new Date()): AnalyticsQuery {
  const groupBy = single(query.group_by, 'group_by');
  if (groupBy !== undefined && groupBy !== 'agent_id') throw badRequest('group_by must be agent_id');
  const bucket = single(query.bucket, 'bucket') ?? 'hour';
  if (bucket !== 'hour' && bucket !== 'day') throw badRequest('bucket must be hour or day');
  const window = timeWindow(query);
  const since = window.since;
  if (!since) throw badRequest('since is required');
  const until = window.until ?? now;
  if (since.getTime() > until.getTime()) throw badRequest(SINCE_AFTER_UNTIL);
  if (until.getTime() - since.getTime() > MAX_WINDOW_MS) throw badRequest('the window must not exceed 31 days');
  return { bucket, since, until };
}
