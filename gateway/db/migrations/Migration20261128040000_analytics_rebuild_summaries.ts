import { Migration } from '@mikro-orm/migrations';
import { rebuildForgettingSummaries } from './Migration20261122123000_analytics_summaries.ts';

// analytics_rebuild() leaves every summary current instead of forgetting them: the hourly and
// daily percentiles are computed in the same pass, from the invocation rows it already reads
// (percentile_disc over the sketch indexes is the nearest rank gateway/analytics/sketch.ts
// takes over the merged histograms, so the figures are the same). Before, the first read of a
// month after a rebuild or the backfill computed every summary from 1.5 million histogram
// buckets in the API and wrote them back: 650-850 ms at one million invocations, growing with
// them. analytics_sketch_value is the SQL twin of sketch.ts's sketchValue.
// The same holds for a month of live traffic nobody had read yet: analytics_summarize() fills
// the summaries of closed hours and days from their histograms, run in the background.
// Exported for the migration that replaced it (Migration20261206160000_analytics_fold), whose
// down() restores it.
export const rebuildWithSummaries = `
      create or replace function analytics_rebuild(p_tenant text default null) returns bigint
      language plpgsql as $$
      declare
        rebuilt bigint;
      begin
        delete from analytics_daily_summary where p_tenant is null or tenant_id = p_tenant;
        delete from analytics_hourly where p_tenant is null or tenant_id = p_tenant;
        create temporary table analytics_rebuild_base on commit drop as
          select tenant_id, agent_id, date_trunc('hour', created_at, 'UTC') as bucket_start,
                 (status = 'failed' or error_class is not null) as is_error,
                 case when status = 'failed' or error_class is not null then coalesce(error_class, 'unknown') end as cls,
                 analytics_sketch_index(latency_ms) as li,
                 analytics_sketch_index(ttft_ms) as ti
          from invocations
          where status in ('succeeded', 'failed') and (p_tenant is null or tenant_id = p_tenant);
        insert into analytics_hourly (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft, summary, summary_count)
        select k.tenant_id, k.agent_id, k.bucket_start, k.n, k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}'),
               analytics_summary(k.lp, k.tp), k.n
        from (select tenant_id, agent_id, bucket_start, count(*) as n, count(*) filter (where is_error) as e,
                     percentile_disc(array[0.5, 0.95, 0.99]) within group (order by li) as lp,
                     percentile_disc(array[0.5, 0.95, 0.99]) within group (order by ti) as tp
              from analytics_rebuild_base group by 1, 2, 3) as k
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(cls, n) as j
                   from (select tenant_id, agent_id, bucket_start, cls, count(*) as n from analytics_rebuild_base
                         where cls is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as c using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(li::text, n) as j
                   from (select tenant_id, agent_id, bucket_start, li, count(*) as n from analytics_rebuild_base
                         where li is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as l using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(ti::text, n) as j
                   from (select tenant_id, agent_id, bucket_start, ti, count(*) as n from analytics_rebuild_base
                         where ti is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as t using (tenant_id, agent_id, bucket_start);
        get diagnostics rebuilt = row_count;
        -- A day's percentiles over all its samples: what merging its 24 hourly histograms gives.
        -- A read's write-back may have stored a day since the delete: the rebuild's figure wins.
        insert into analytics_daily_summary (tenant_id, agent_id, day, count, summary)
        select tenant_id, agent_id, date_trunc('day', bucket_start, 'UTC'), count(*),
               analytics_summary(percentile_disc(array[0.5, 0.95, 0.99]) within group (order by li),
                                 percentile_disc(array[0.5, 0.95, 0.99]) within group (order by ti))
        from analytics_rebuild_base group by 1, 2, 3
        on conflict (tenant_id, day, agent_id) do update set count = excluded.count, summary = excluded.summary;
        drop table analytics_rebuild_base;
        return rebuilt;
      end
      $$`;

export class Migration20261128040000_analytics_rebuild_summaries extends Migration {
  override up(): void {
    this.addSql(`
      create function analytics_sketch_value(i integer) returns bigint
      language sql immutable parallel safe as $$
        select case
          when i < 128 then i::bigint
          else ((64 + (i - 128) % 64)::bigint << ((i - 128) / 64 + 1)) + (((1::bigint << ((i - 128) / 64 + 1)) - 1) / 2)
        end
      $$`);
    // A summary as the reader shapes it: {p50, p95, p99} of bucket values, nulls without samples.
    this.addSql(`
      create function analytics_summary(latency integer[], ttft integer[]) returns jsonb
      language sql immutable parallel safe as $$
        select jsonb_build_object(
          'latency_ms', jsonb_build_object('p50', analytics_sketch_value(latency[1]), 'p95', analytics_sketch_value(latency[2]), 'p99', analytics_sketch_value(latency[3])),
          'ttft_ms', jsonb_build_object('p50', analytics_sketch_value(ttft[1]), 'p95', analytics_sketch_value(ttft[2]), 'p99', analytics_sketch_value(ttft[3])))
      $$`);
    // The reader's percentiles of one stored histogram (bucket index -> count), in SQL: the
    // smallest bucket whose running count reaches the nearest rank max(1, ceil(q * total)).
    this.addSql(`
      create function analytics_histogram_percentiles(h jsonb) returns jsonb
      language sql immutable parallel safe as $$
        select jsonb_build_object(
          'p50', analytics_sketch_value(min(k) filter (where seen >= greatest(1, ceil(0.5::float8 * total)))),
          'p95', analytics_sketch_value(min(k) filter (where seen >= greatest(1, ceil(0.95::float8 * total)))),
          'p99', analytics_sketch_value(min(k) filter (where seen >= greatest(1, ceil(0.99::float8 * total)))))
        from (select k, sum(n) over (order by k) as seen, (sum(n) over ())::float8 as total
              from (select key::integer as k, value::bigint as n from jsonb_each_text(h)) as e) as w
      $$`);
    // Merging histograms is adding their counts (a day's is the sum of its hours').
    this.addSql(`
      create function analytics_merge_counts(acc jsonb, delta jsonb) returns jsonb
      language sql immutable parallel safe as $$ select analytics_add_counts(acc, delta, 1) $$`);
    this.addSql(
      `create aggregate analytics_merged(jsonb) (sfunc = analytics_merge_counts, stype = jsonb, initcond = '{}')`,
    );
    // Summarizes the closed hours of [p_since, p_until) whose summary is not current, and the
    // closed days of that window whose day summary is not: what a read would otherwise compute
    // and write back (gateway/analytics/summaries.ts runs it in the background). One caller at
    // a time (a transaction-level advisory lock; a second caller returns at once). The index
    // on bucket_start finds the window without reading every tenant's history; it holds no
    // column the trigger updates, so the trigger's updates stay HOT.
    this.addSql(`create index analytics_hourly_bucket on analytics_hourly (bucket_start)`);
    this.addSql(`
      create function analytics_summarize(p_since timestamptz, p_until timestamptz) returns bigint
      language plpgsql as $$
      declare
        hours bigint;
      begin
        if not pg_try_advisory_xact_lock(hashtext('analytics_summarize')) then
          return 0;
        end if;
        update analytics_hourly
           set summary = jsonb_build_object('latency_ms', analytics_histogram_percentiles(latency),
                                            'ttft_ms', analytics_histogram_percentiles(ttft)),
               summary_count = count
         where bucket_start >= p_since and bucket_start < p_until and summary_count is distinct from count;
        get diagnostics hours = row_count;
        with days as (
          select tenant_id, agent_id, date_trunc('day', bucket_start, 'UTC') as day, sum(count) as n
            from analytics_hourly
           where bucket_start >= date_trunc('day', p_since, 'UTC') and bucket_start < date_trunc('day', p_until, 'UTC')
           group by 1, 2, 3
        ), stale as (
          select d.* from days d
            left join analytics_daily_summary s on s.tenant_id = d.tenant_id and s.day = d.day and s.agent_id = d.agent_id
           where s.count is distinct from d.n
        )
        insert into analytics_daily_summary as s (tenant_id, agent_id, day, count, summary)
        select st.tenant_id, st.agent_id, st.day, st.n,
               jsonb_build_object('latency_ms', analytics_histogram_percentiles(m.l), 'ttft_ms', analytics_histogram_percentiles(m.t))
          from stale st
          cross join lateral (
            select analytics_merged(h.latency) as l, analytics_merged(h.ttft) as t from analytics_hourly h
             where h.tenant_id = st.tenant_id and h.agent_id = st.agent_id
               and h.bucket_start >= st.day and h.bucket_start < st.day + interval '1 day') as m
        on conflict (tenant_id, day, agent_id) do update set count = excluded.count, summary = excluded.summary;
        return hours;
      end
      $$`);
    this.addSql(rebuildWithSummaries);
  }

  override down(): void {
    this.addSql(rebuildForgettingSummaries);
    this.addSql('drop function if exists analytics_summarize(timestamptz, timestamptz)');
    this.addSql('drop index if exists analytics_hourly_bucket');
    this.addSql('drop aggregate if exists analytics_merged(jsonb)');
    this.addSql('drop function if exists analytics_merge_counts(jsonb, jsonb)');
    this.addSql('drop function if exists analytics_histogram_percentiles(jsonb)');
    this.addSql('drop function if exists analytics_summary(integer[], integer[])');
    this.addSql('drop function if exists analytics_sketch_value(integer)');
  }
}
