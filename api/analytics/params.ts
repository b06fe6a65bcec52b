// GET /v1/analytics parameters (SPEC "Analytics"): group_by agent_id only, bucket hour or
// day (default hour), since required, until default now, both RFC 3339, since ≤ until, and a
// window of at most 31 days. Anything else is a 400.
import { badRequest } from '../errors.ts';
import type { AnalyticsQuery } from '../../gateway/analytics/query.ts';

export type { AnalyticsQuery };

export const MAX_WINDOW_MS = 31 * 24 * 3600 * 1000;

// RFC 3339 date-time: full date, T (or t / space per the RFC's note), time with optional
// fraction, and a mandatory zone (Z or ±hh:mm).
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/;

export function parseRfc3339(value: string): Date | null {
  const m = RFC3339.exec(value);
  if (!m) return null;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  // Year 0000 is valid RFC 3339 but no PostgreSQL timestamp (there is no year zero).
  if (year < 1 || month < 1 || month > 12 || hour > 23 || minute > 59 || second > 60) return null;
  // Date.parse rolls 2024-02-30 over into March; the day must exist in its month.
  if (day < 1 || day > new Date(Date.UTC(year, month, 0)).getUTCDate()) return null;
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return null;
  // A leap second (:60) is valid RFC 3339; JavaScript has none, so it counts as :59.
  const date = new Date(value.replace(/:60(?=[.Zz+-]|$)/, ':59').replace(/^(.{10})[t ]/, '$1T'));
  return Number.isNaN(date.getTime()) ? null : date;
}

function single(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw badRequest(`${name} must be given once`);
  return value;
}

/** An unencoded `+02:00` offset arrives as ` 02:00` (form decoding); read it as the `+` it was. */
function restorePlus(value: string | undefined): string | undefined {
  return value?.replace(/ (\d{2}:\d{2})$/, '+$1');
}

export function parseAnalyticsQuery(query: Record<string, unknown>, now = new Date()): AnalyticsQuery {
  const groupBy = single(query.group_by, 'group_by');
  if (groupBy !== undefined && groupBy !== 'agent_id') throw badRequest('group_by must be agent_id');
  const bucket = single(query.bucket, 'bucket') ?? 'hour';
  if (bucket !== 'hour' && bucket !== 'day') throw badRequest('bucket must be hour or day');
  const sinceRaw = restorePlus(single(query.since, 'since'));
  if (sinceRaw === undefined || sinceRaw === '') throw badRequest('since is required');
  const since = parseRfc3339(sinceRaw);
  if (!since) throw badRequest('since must be an RFC 3339 date-time');
  const untilRaw = restorePlus(single(query.until, 'until'));
  const until = untilRaw === undefined ? now : parseRfc3339(untilRaw);
  if (!until) throw badRequest('until must be an RFC 3339 date-time');
  if (since.getTime() > until.getTime()) throw badRequest('since must not be after until');
  if (until.getTime() - since.getTime() > MAX_WINDOW_MS) throw badRequest('the window must not exceed 31 days');
  return { bucket, since, until };
}
