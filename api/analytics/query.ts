// Reads the hourly rollups of a window and shapes the SPEC's groups. Hourly groups are the
// rows themselves; daily groups merge each agent's 24 hourly histograms first, so daily
// percentiles are computed over the day's samples. Buckets are UTC hours or days; a bucket
// is included when it overlaps [since, until], and its
// figures cover the whole bucket: the window is widened to whole buckets at both ends.
import type { MikroORM } from '@mikro-orm/postgresql';
import { mergeSketch, percentiles, type Percentiles, type Sketch } from './sketch.ts';
import type { AnalyticsQuery } from './params.ts';

export type AnalyticsGroup = {
  agent_id: string;
  bucket_start: string;
  count: number;
  error_rate: number;
  by_error_class: Record<string, number>;
  latency_ms: Percentiles;
  ttft_ms: Percentiles;
};

export type AnalyticsResult = {
  range: { since: string; until: string };
  bucket: 'hour' | 'day';
  groups: AnalyticsGroup[];
};

type Acc = { agent: string; start: number; count: number; errors: number; classes: Sketch; latency: Sketch; ttft: Sketch };

const HOUR = 3600_000;
const DAY = 24 * HOUR;

export function bucketStart(ms: number, bucket: 'hour' | 'day'): number {
  const size = bucket === 'hour' ? HOUR : DAY;
  return Math.floor(ms / size) * size;
}

export async function queryAnalytics(orm: MikroORM, tenantId: string, q: AnalyticsQuery): Promise<AnalyticsResult> {
  const from = bucketStart(q.since.getTime(), q.bucket);
  const to = bucketStart(q.until.getTime(), q.bucket) + (q.bucket === 'hour' ? HOUR : DAY);
  const rows = await orm.em.getConnection().execute<Array<Record<string, any>>>(
    `select agent_id, (extract(epoch from bucket_start) * 1000)::bigint as start_ms, count, errors, by_error_class, latency, ttft
     from analytics_hourly
     where tenant_id = ? and bucket_start >= ?::timestamptz and bucket_start < ?::timestamptz
     order by bucket_start, agent_id`,
    [tenantId, new Date(from).toISOString(), new Date(to).toISOString()],
  );

  // Rows arrive ordered by hour then agent; a day's group collects its hours across the scan.
  const groups = new Map<string, Acc>();
  for (const row of rows) {
    const start = bucketStart(Number(row.start_ms), q.bucket);
    const key = `${start}\u0000${row.agent_id}`;
    let acc = groups.get(key);
    if (!acc) {
      groups.set(key, (acc = { agent: row.agent_id, start, count: 0, errors: 0, classes: {}, latency: {}, ttft: {} }));
    }
    acc.count += Number(row.count);
    acc.errors += Number(row.errors);
    // Hourly groups hold one row each: take its objects as they are instead of copying.
    if (q.bucket === 'hour') {
      acc.classes = row.by_error_class;
      acc.latency = row.latency;
      acc.ttft = row.ttft;
    } else {
      mergeSketch(acc.classes, row.by_error_class);
      mergeSketch(acc.latency, row.latency);
      mergeSketch(acc.ttft, row.ttft);
    }
  }

  const out: AnalyticsGroup[] = [];
  for (const acc of groups.values()) {
    out.push({
      agent_id: acc.agent,
      bucket_start: new Date(acc.start).toISOString(),
      count: acc.count,
      error_rate: acc.count === 0 ? 0 : acc.errors / acc.count,
      by_error_class: acc.classes,
      latency_ms: percentiles(acc.latency),
      ttft_ms: percentiles(acc.ttft),
    });
  }
  // Day groups were created in hour order per agent interleaving; restore (bucket, agent) order.
  if (q.bucket === 'day') out.sort((a, b) => (a.bucket_start < b.bucket_start ? -1 : a.bucket_start > b.bucket_start ? 1 : a.agent_id < b.agent_id ? -1 : a.agent_id > b.agent_id ? 1 : 0));
  return { range: { since: q.since.toISOString(), until: q.until.toISOString() }, bucket: q.bucket, groups: out };
}
