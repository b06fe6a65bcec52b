// The windows the console shows and the series it draws from GET /v1/analytics. One query per
// window and view (the endpoint has a per-caller bucket of its own: 30 a minute, 10 at once by
// default), refreshed every minute.
import type { AnalyticsGroup } from './types.ts';

export type WindowName = 'hour' | 'day' | 'week' | 'month';

export const WINDOWS: Record<WindowName, { label: string; ms: number; bucket: 'hour' | 'day' }> = {
  hour: { label: 'Last hour', ms: 3_600_000, bucket: 'hour' },
  day: { label: 'Last day', ms: 86_400_000, bucket: 'hour' },
  week: { label: 'Last week', ms: 7 * 86_400_000, bucket: 'hour' },
  month: { label: 'Last 30 days', ms: 30 * 86_400_000, bucket: 'day' },
};

export const windowName = (value: string | null): WindowName =>
  value && value in WINDOWS ? (value as WindowName) : 'day';

/** The window ending now, to the second: the query's since/until, which the page shows too. */
export function windowRange(name: WindowName, now = Date.now()): { since: string; until: string } {
  const until = Math.floor(now / 1000) * 1000;
  return { since: new Date(until - WINDOWS[name].ms).toISOString(), until: new Date(until).toISOString() };
}

/** A group's revenue and what of it was not collected, in the asset's smallest unit (null: an API without revenue). */
function revenueOf(group: AnalyticsGroup): { amount: number; uncollected: number } | null {
  const revenue = group.revenue;
  if (!revenue) return null;
  return { amount: Number(revenue.amount), uncollected: Number(revenue.uncollected?.amount ?? 0) };
}

export type Series = {
  /** Bucket starts, seconds since the epoch (uPlot's x). */
  x: number[];
  calls: number[];
  errors: number[];
  p50: (number | null)[];
  p95: (number | null)[];
  revenue: (number | null)[];
  uncollected: (number | null)[];
  hasRevenue: boolean;
};

/**
 * Every bucket of the window, oldest first, summed over the groups given (one agent's, or all).
 * Calls and errors add up exactly. Percentiles do not: over several agents the bucket's p50 and
 * p95 are the highest agent's (the whole's p95 is never above the highest p95 of its parts).
 */
export function seriesOf(
  groups: AnalyticsGroup[],
  range: { since: string; until: string },
  bucket: 'hour' | 'day',
): Series {
  const step = bucket === 'hour' ? 3_600_000 : 86_400_000;
  const first = Math.floor(Date.parse(range.since) / step) * step;
  const last = Math.floor(Date.parse(range.until) / step) * step;
  const index = new Map<number, number>();
  const s: Series = { x: [], calls: [], errors: [], p50: [], p95: [], revenue: [], uncollected: [], hasRevenue: false };
  for (let t = first, i = 0; t <= last; t += step, i++) {
    index.set(t, i);
    s.x.push(t / 1000);
    s.calls.push(0);
    s.errors.push(0);
    s.p50.push(null);
    s.p95.push(null);
    s.revenue.push(0);
    s.uncollected.push(0);
  }
  const max = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));
  for (const g of groups) {
    const i = index.get(Date.parse(g.bucket_start));
    if (i === undefined) continue;
    s.calls[i] += g.count;
    s.errors[i] += Math.round(g.count * g.error_rate);
    s.p50[i] = max(s.p50[i], g.latency_ms.p50);
    s.p95[i] = max(s.p95[i], g.latency_ms.p95);
    const revenue = revenueOf(g);
    if (revenue !== null) {
      s.hasRevenue = true;
      s.revenue[i] = (s.revenue[i] ?? 0) + revenue.amount;
      s.uncollected[i] = (s.uncollected[i] ?? 0) + revenue.uncollected;
    }
  }
  return s;
}

export type Totals = {
  calls: number;
  errors: number;
  p50: number | null;
  p95: number | null;
  revenue: number | null;
  uncollected: number | null;
};

export function totalsOf(s: Series): Totals {
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const top = (xs: (number | null)[]) =>
    xs.reduce<number | null>((a, b) => (b === null ? a : a === null ? b : Math.max(a, b)), null);
  return {
    calls: sum(s.calls),
    errors: sum(s.errors),
    p50: top(s.p50),
    p95: top(s.p95),
    revenue: s.hasRevenue ? sum(s.revenue.map((r) => r ?? 0)) : null,
    uncollected: s.hasRevenue ? sum(s.uncollected.map((r) => r ?? 0)) : null,
  };
}
