// Reads the rollups of a window and shapes the v1 contract's groups. Buckets are UTC hours or days;
// a bucket is included when it overlaps [since, until], and its figures cover the whole
// bucket (the window is widened to whole buckets at both ends).
//
// Percentiles come from the rollup histograms, through a cache: a summary stored with the
// count it was computed at, used only while the count is unchanged (see migration
// Migration20261122123000_analytics_summaries). Hourly groups read their row's summary, or
// its histograms when the row moved on; daily groups merge the day's 24 hourly histograms
// (true daily percentiles, not averages of hourly ones) unless the day's summary is current.
// Freshly computed summaries are written back after the answer, best effort.
//
// Each group also says what its paid calls brought (`revenue`, additive to the v1 contract's
// fields): how many completed paid calls, the sum of their charges, and the charges that were
// not collected, by reason (docs/ANALYTICS.md). Amounts are decimal strings (uint256 sums).
//
// The answer is built as JSON text, not as objects for Koa to stringify: a month of hourly
// groups is 7440 of them, two megabytes. An hourly group whose summary is current leaves
// PostgreSQL as its JSON text (the summary and error classes as the text of their jsonb
// values, never parsed and stringified again); the others are written here the same way.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import { mergeSketch, percentiles, type Percentiles, type Sketch } from './sketch.ts';

/** A validated analytics request: bucket size and a half-open time range. */
export type AnalyticsQuery = { bucket: 'hour' | 'day'; since: Date; until: Date };

type Charges = { count: number; amount: string };

export type Revenue = Charges & {
  /** Completed paid calls; `amount` is the sum of their charges. */
  uncollected: Charges & { by_reason: Record<string, Charges> };
};

export type AnalyticsGroup = {
  agent_id: string;
  bucket_start: string;
  count: number;
  error_rate: number;
  by_error_class: Record<string, number>;
  latency_ms: Percentiles;
  ttft_ms: Percentiles;
  revenue: Revenue;
};

type AnalyticsResult = {
  range: { since: string; until: string };
  bucket: 'hour' | 'day';
  groups: AnalyticsGroup[];
};

type Summary = { latency_ms: Percentiles; ttft_ms: Percentiles };
type Row = Record<string, any>;

// An hourly row's revenue as JSON text, written by the query (see Revenue): `uncollected` holds
// counts by reason, `uncollected_amount` amounts by reason (decimal strings; absent when 0).
const REVENUE_JSON = `'{"count":' || paid || ',"amount":"' || revenue::text || '","uncollected":'
  || case when uncollected = '{}' then '{"count":0,"amount":"0","by_reason":{}}'
     else (select '{"count":' || sum(n.value::bigint) || ',"amount":"' || sum(coalesce(uncollected_amount ->> n.key, '0')::numeric)::text
                  || '","by_reason":' || jsonb_object_agg(n.key, jsonb_build_object('count', n.value::bigint, 'amount', coalesce(uncollected_amount ->> n.key, '0')))::text || '}'
             from jsonb_each_text(uncollected) as n) end || '}'`;

const HOUR = 3600_000;
const DAY = 24 * HOUR;
const WRITE_BACK_CHUNK = 500;
const STALE_DAYS_BY_LIST = 200;
const LAST_INSTANT = Date.parse('9999-12-31T23:59:59.999Z');

function bucketStart(ms: number, bucket: 'hour' | 'day'): number {
  const size = bucket === 'hour' ? HOUR : DAY;
  return Math.floor(ms / size) * size;
}

function summarize(latency: Sketch, ttft: Sketch): Summary {
  return { latency_ms: percentiles(latency), ttft_ms: percentiles(ttft) };
}

/**
 * A group as JSON text, its fields in the contract's order (revenue after them); the error
 * classes and revenue (texts from PostgreSQL) spliced in as they are.
 */
function groupJson(
  agent: string,
  start: number,
  count: number,
  errors: number,
  classes: string,
  latency: Percentiles,
  ttft: Percentiles,
  revenue: string,
): string {
  const errorRate = JSON.stringify(count === 0 ? 0 : errors / count);
  return `{"agent_id":${JSON.stringify(agent)},"bucket_start":"${new Date(start).toISOString()}","count":${count},"error_rate":${errorRate},"by_error_class":${classes},"latency_ms":${JSON.stringify(latency)},"ttft_ms":${JSON.stringify(ttft)},"revenue":${revenue}}`;
}

const noRevenue = (): Revenue => ({ count: 0, amount: '0', uncollected: { count: 0, amount: '0', by_reason: {} } });

/** Adds an hourly row's revenue columns into a day's. */
function addRevenue(day: Revenue, row: Row): void {
  const plus = (a: string, b: string | number) => String(BigInt(a) + BigInt(b));
  day.count += Number(row.paid);
  day.amount = plus(day.amount, row.revenue);
  const counts = row.uncollected as Record<string, number>;
  const amounts = row.uncollected_amount as Record<string, string>;
  for (const [reason, n] of Object.entries(counts)) {
    const amount = amounts[reason] ?? '0';
    const into = (day.uncollected.by_reason[reason] ??= { count: 0, amount: '0' });
    into.count += n;
    into.amount = plus(into.amount, amount);
    day.uncollected.count += n;
    day.uncollected.amount = plus(day.uncollected.amount, amount);
  }
}

function group(
  agent: string,
  start: number,
  count: number,
  errors: number,
  classes: Record<string, number>,
  summary: Summary,
  revenue: Revenue,
): AnalyticsGroup {
  return {
    agent_id: agent,
    bucket_start: new Date(start).toISOString(),
    count,
    error_rate: count === 0 ? 0 : errors / count,
    by_error_class: classes,
    latency_ms: summary.latency_ms,
    ttft_ms: summary.ttft_ms,
    revenue,
  };
}

export function createAnalyticsReader(orm: MikroORM, log?: Logger) {
  const sql = (query: string, params: unknown[]) => orm.em.getConnection().execute<Row[]>(query, params);

  function writeBack(task: () => Promise<unknown>): void {
    task().catch((err: Error) => log?.warn({ err: err.message }, 'analytics summary write-back failed'));
  }

  /** The hourly groups as JSON texts, in the contract's order. */
  async function hourly(tenantId: string, from: number, to: number): Promise<string[]> {
    // `current`: the summary was computed at the row's count (and has both figures). Such a
    // row's group is written here, in SQL, as groupJson writes it (bucket_start as
    // toISOString's, error_rate a float8 in its shortest exact digits); any other row's
    // histograms are read and summarized in this process.
    const rows = await sql(
      `select case when current then
                '{"agent_id":' || to_json(agent_id)::text
                || ',"bucket_start":"' || to_char(bucket_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                || '","count":' || count
                || ',"error_rate":' || case when count = 0 then 0 else errors::float8 / count end
                || ',"by_error_class":' || by_error_class::text
                || ',"latency_ms":' || (summary -> 'latency_ms')::text
                || ',"ttft_ms":' || (summary -> 'ttft_ms')::text
                || ',"revenue":' || ${REVENUE_JSON} || '}'
              end as json,
              case when not current then agent_id end as agent_id,
              case when not current then (extract(epoch from bucket_start) * 1000)::bigint end as start_ms,
              case when not current then count end as count,
              case when not current then errors end as errors,
              case when not current then by_error_class::text end as classes,
              case when not current then latency end as latency,
              case when not current then ttft end as ttft,
              case when not current then ${REVENUE_JSON} end as revenue
       from analytics_hourly,
            lateral (select coalesce(summary_count = count and summary -> 'latency_ms' is not null and summary -> 'ttft_ms' is not null, false) as current) as c
       where tenant_id = ? and bucket_start >= ?::timestamptz and bucket_start < ?::timestamptz
       order by bucket_start, agent_id collate "C"`,
      [tenantId, new Date(from).toISOString(), new Date(to).toISOString()],
    );
    const fresh: Array<{ agent: string; start: number; count: number; summary: Summary }> = [];
    const out = rows.map((row) => {
      if (row.json !== null) return row.json as string;
      const count = Number(row.count);
      const start = Number(row.start_ms);
      const summary = summarize(row.latency, row.ttft);
      fresh.push({ agent: row.agent_id, start, count, summary });
      const { latency_ms: latency, ttft_ms: ttft } = summary;
      return groupJson(row.agent_id, start, count, Number(row.errors), row.classes, latency, ttft, row.revenue);
    });
    if (fresh.length > 0) {
      writeBack(async () => {
        for (let i = 0; i < fresh.length; i += WRITE_BACK_CHUNK) {
          const chunk = fresh.slice(i, i + WRITE_BACK_CHUNK);
          // Guarded by the count: a row that moved on since the read keeps no stale summary.
          await sql(
            `update analytics_hourly as h set summary = v.summary::jsonb, summary_count = v.n::bigint
             from (values ${chunk.map(() => '(?, ?::timestamptz, ?, ?)').join(', ')}) as v(agent_id, bucket_start, n, summary)
             where h.tenant_id = ? and h.agent_id = v.agent_id and h.bucket_start = v.bucket_start and h.count = v.n::bigint`,
            [
              ...chunk.flatMap((f) => [f.agent, new Date(f.start).toISOString(), f.count, JSON.stringify(f.summary)]),
              tenantId,
            ],
          );
        }
      });
    }
    return out;
  }

  async function daily(tenantId: string, from: number, to: number): Promise<AnalyticsGroup[]> {
    const range = [tenantId, new Date(from).toISOString(), new Date(to).toISOString()];
    const [rows, stored] = await Promise.all([
      sql(
        `select agent_id, (extract(epoch from date_trunc('day', bucket_start, 'UTC')) * 1000)::bigint as day_ms, count, errors, by_error_class,
                paid, revenue::text as revenue, uncollected, uncollected_amount
         from analytics_hourly
         where tenant_id = ? and bucket_start >= ?::timestamptz and bucket_start < ?::timestamptz`,
        range,
      ),
      sql(
        `select agent_id, (extract(epoch from day) * 1000)::bigint as day_ms, count, summary
         from analytics_daily_summary where tenant_id = ? and day >= ?::timestamptz and day < ?::timestamptz`,
        range,
      ),
    ]);
    type Day = {
      agent: string;
      start: number;
      count: number;
      errors: number;
      classes: Record<string, number>;
      summary: Summary | null;
      revenue: Revenue;
    };
    const days = new Map<string, Day>();
    const keyOf = (agent: string, start: number) => `${start}\u0000${agent}`;
    for (const row of rows) {
      const start = Number(row.day_ms);
      const key = keyOf(row.agent_id, start);
      let day = days.get(key);
      if (!day)
        days.set(
          key,
          (day = { agent: row.agent_id, start, count: 0, errors: 0, classes: {}, summary: null, revenue: noRevenue() }),
        );
      day.count += Number(row.count);
      day.errors += Number(row.errors);
      mergeSketch(day.classes, row.by_error_class);
      addRevenue(day.revenue, row);
    }
    for (const s of stored) {
      const day = days.get(keyOf(s.agent_id, Number(s.day_ms)));
      if (day && Number(s.count) === day.count) day.summary = s.summary;
    }

    // Days without a current summary: merge their hourly histograms now.
    const stale = [...days.values()].filter((d) => !d.summary);
    if (stale.length > 0) {
      // The usual case is today's few agent-days: fetch exactly those. A cold window (after a
      // rebuild) fetches the range in one scan instead of a join against a huge VALUES list.
      const hist =
        stale.length <= STALE_DAYS_BY_LIST
          ? await sql(
              `select h.agent_id, (extract(epoch from d.day) * 1000)::bigint as day_ms, h.count, h.latency, h.ttft
             from analytics_hourly as h
             join (values ${stale.map(() => '(?, ?::timestamptz)').join(', ')}) as d(agent_id, day)
               on h.agent_id = d.agent_id and h.bucket_start >= d.day and h.bucket_start < d.day + interval '1 day'
             where h.tenant_id = ?`,
              [...stale.flatMap((d) => [d.agent, new Date(d.start).toISOString()]), tenantId],
            )
          : await sql(
              `select agent_id, (extract(epoch from date_trunc('day', bucket_start, 'UTC')) * 1000)::bigint as day_ms, count, latency, ttft
             from analytics_hourly where tenant_id = ? and bucket_start >= ?::timestamptz and bucket_start < ?::timestamptz`,
              range,
            );
      const merged = new Map<string, { count: number; latency: Sketch; ttft: Sketch }>();
      const wanted = new Set(stale.map((d) => keyOf(d.agent, d.start)));
      for (const row of hist) {
        const key = keyOf(row.agent_id, Number(row.day_ms));
        if (!wanted.has(key)) continue;
        let m = merged.get(key);
        if (!m) merged.set(key, (m = { count: 0, latency: {}, ttft: {} }));
        m.count += Number(row.count);
        mergeSketch(m.latency, row.latency);
        mergeSketch(m.ttft, row.ttft);
      }
      const fresh: Array<{ day: Day; count: number; summary: Summary }> = [];
      for (const day of stale) {
        const m = merged.get(keyOf(day.agent, day.start)) ?? { count: 0, latency: {}, ttft: {} };
        day.summary = summarize(m.latency, m.ttft);
        // Stored under the count its histograms had (which may already be past day.count).
        fresh.push({ day, count: m.count, summary: day.summary });
      }
      writeBack(async () => {
        for (let i = 0; i < fresh.length; i += WRITE_BACK_CHUNK) {
          const chunk = fresh.slice(i, i + WRITE_BACK_CHUNK);
          await sql(
            `insert into analytics_daily_summary as s (tenant_id, agent_id, day, count, summary)
             values ${chunk.map(() => '(?, ?, ?::timestamptz, ?, ?::jsonb)').join(', ')}
             on conflict (tenant_id, day, agent_id) do update set count = excluded.count, summary = excluded.summary
             where s.count <> excluded.count`,
            chunk.flatMap((f) => [
              tenantId,
              f.day.agent,
              new Date(f.day.start).toISOString(),
              f.count,
              JSON.stringify(f.summary),
            ]),
          );
        }
      });
    }

    return [...days.values()]
      .sort((a, b) => a.start - b.start || (a.agent < b.agent ? -1 : a.agent > b.agent ? 1 : 0))
      .map((d) => group(d.agent, d.start, d.count, d.errors, d.classes, d.summary!, d.revenue));
  }

  return {
    /** The v1 contract's answer (AnalyticsResult) as JSON text. */
    async queryJson(tenantId: string, q: AnalyticsQuery): Promise<string> {
      const size = q.bucket === 'hour' ? HOUR : DAY;
      const from = bucketStart(q.since.getTime(), q.bucket);
      // The bucket after the last one, held inside the calendar PostgreSQL and ISO strings share.
      const to = Math.min(bucketStart(q.until.getTime(), q.bucket) + size, LAST_INSTANT);
      const head: Omit<AnalyticsResult, 'groups'> = {
        range: { since: q.since.toISOString(), until: q.until.toISOString() },
        bucket: q.bucket,
      };
      const groups =
        q.bucket === 'hour'
          ? (await hourly(tenantId, from, to)).join(',')
          : (await daily(tenantId, from, to)).map((g) => JSON.stringify(g)).join(',');
      return `${JSON.stringify(head).slice(0, -1)},"groups":[${groups}]}`;
    },
  };
}
