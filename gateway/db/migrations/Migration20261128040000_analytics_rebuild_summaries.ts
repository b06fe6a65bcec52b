import { Migration } from '@mikro-orm/migrations';
import { rebuildForgettingSummaries } from './Migration20261122123000_analytics_summaries.ts';

// analytics_rebuild() leaves every summary current instead of forgetting them: the hourly and
// daily percentiles are computed in the same pass, from the invocation rows it already reads
// (percentile_disc over the sketch indexes is the nearest rank gateway/analytics/sketch.ts
// takes over the merged histograms, so the figures are the same). Before, the first read of a
// month after a rebuild or the backfill computed every summary from 1.5 million histogram
// buckets in the API and wrote them back: 650-850 ms at one million invocations, growing with
// them. analytics_sketch_value is the SQL twin of sketch.ts's sketchValue.
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
    this.addSql(`
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
        insert into analytics_daily_summary (tenant_id, agent_id, day, count, summary)
        select tenant_id, agent_id, date_trunc('day', bucket_start, 'UTC'), count(*),
               analytics_summary(percentile_disc(array[0.5, 0.95, 0.99]) within group (order by li),
                                 percentile_disc(array[0.5, 0.95, 0.99]) within group (order by ti))
        from analytics_rebuild_base group by 1, 2, 3;
        drop table analytics_rebuild_base;
        return rebuilt;
      end
      $$`);
  }

  override down(): void {
    this.addSql(rebuildForgettingSummaries);
    this.addSql('drop function if exists analytics_summary(integer[], integer[])');
    this.addSql('drop function if exists analytics_sketch_value(integer)');
  }
}
