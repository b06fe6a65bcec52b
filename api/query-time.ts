// The one reading of a date-time query parameter (`since`, `until`) on every endpoint that
// takes one: GET /v1/invocations, GET /v1/analytics, GET /v1/policy/decisions.
// RFC 3339: full date, `T` (or `t` / space, per the RFC's note), time with an optional
// fraction, and a mandatory zone (`Z` or ±hh:mm). A `+` typed unencoded in a URL is a space
// once the query is decoded (form encoding), so `…T00:00:00+00:00` arrives as
// `…T00:00:00 00:00`: a trailing ` hh:mm` is read as the `+hh:mm` it was, the same everywhere.
// The instant named must lie in years 1 to 9999 once in UTC: an offset can carry a written
// 0001-01-01 into year 0 or 9999-12-31 into year 10000, which PostgreSQL and Date#toISOString
// do not read back as the same instant.
import { badRequest } from './errors.ts';

const FIRST_INSTANT = Date.parse('0001-01-01T00:00:00.000Z');
const LAST_INSTANT = Date.parse('9999-12-31T23:59:59.999Z');

/** Whether a date is one an API timestamp may name: a real instant in years 1 to 9999 (UTC). */
export function inTimestampRange(date: Date): boolean {
  const ms = date.getTime();
  return ms >= FIRST_INSTANT && ms <= LAST_INSTANT;
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/;

/** The instant an RFC 3339 date-time names; null when it is not one (or names no real day). */
function parseRfc3339(value: string): Date | null {
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

/** An unencoded `+02:00` offset arrives as ` 02:00` (form decoding); read it as the `+` it was. */
function restorePlus(value: string): string {
  return value.replace(/ (\d{2}:\d{2})$/, '+$1');
}

/**
 * Query parameter `name` as an instant: undefined when absent or empty; a 400 naming the
 * parameter when it is given twice, is not an RFC 3339 date-time or names an instant out of range.
 */
function timeParam(query: Record<string, unknown>, name: string): Date | undefined {
  const raw = query[name];
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw badRequest(`${name} may be given once`);
  const date = parseRfc3339(restorePlus(raw));
  if (!date) throw badRequest(`${name} must be an RFC 3339 date-time`);
  if (!inTimestampRange(date)) throw badRequest(`${name} must lie between years 0001 and 9999 in UTC`);
  return date;
}

export const SINCE_AFTER_UNTIL = 'since must not be after until';

/** `since` and `until` (each optional, both inclusive); a 400 when since is after until. */
export function timeWindow(query: Record<string, unknown>): { since?: Date; until?: Date } {
  const since = timeParam(query, 'since');
  const until = timeParam(query, 'until');
  if (since && until && since.getTime() > until.getTime()) throw badRequest(SINCE_AFTER_UNTIL);
  return { since, until };
}
