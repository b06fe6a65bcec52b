import { Migration } from '@mikro-orm/migrations';

// Percentile summaries cached next to the rollups. A month of hourly histograms is about as
// large as the raw samples when hours hold a few hundred calls each, so reading them all on
// every query cannot be fast; but a closed hour never changes again. Each summary records
// the count it was computed at and is used only while the row's count is still that, so a
// late completion makes it stale by construction and the next read recomputes it.
// Daily summaries are keyed the same way by the sum of the day's hourly counts.

// Rebuild (migration Migration20261122100100_analytics) also forgets the day summaries now:
// a repair may change figures without changing counts. Exported for the migration that
// replaces it (Migration20261128040000_analytics_rebuild_summaries), whose down() restores it.
export const rebuildForgettingSummaries = `
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
                 analytics_sketch_index(latency_ms)::text as li,
                 analytics_sketch_index(ttft_ms)::text as ti
          from invocations
          where status in ('succeeded', 'failed') and (p_tenant is null or tenant_id = p_tenant);
        insert into analytics_hourly (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft)
        select k.tenant_id, k.agent_id, k.bucket_start, k.n, k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}')
        from (select tenant_id, agent_id, bucket_start, count(*) as n, count(*) filter (where is_error) as e
              from analytics_rebuild_base group by 1, 2, 3) as k
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(cls, n) as j
                   from (select tenant_id, agent_id, bucket_start, cls, count(*) as n from analytics_rebuild_base
                         where cls is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as c using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(li, n) as j
                   from (select tenant_id, agent_id, bucket_start, li, count(*) as n from analytics_rebuild_base
                         where li is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as l using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(ti, n) as j
                   from (select tenant_id, agent_id, bucket_start, ti, count(*) as n from analytics_rebuild_base
                         where ti is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as t using (tenant_id, agent_id, bucket_start);
        get diagnostics rebuilt = row_count;
        drop table analytics_rebuild_base;
        return rebuilt;
      end
      $$`;

export class Migration20261122123000_analytics_summaries extends Migration {
  override up(): void {
    this.addSql(`alter table analytics_hourly add column summary jsonb, add column summary_count bigint`);
    this.addSql(`
      create table analytics_daily_summary (
        tenant_id text not null,
        agent_id text not null,
        day timestamptz not null,
        count bigint not null,
        summary jsonb not null,
        primary key (tenant_id, day, agent_id)
      )`);
    this.addSql(rebuildForgettingSummaries);
  }

  override down(): void {
    // The rebuild function as it was before this migration (no day summaries to forget).
    this.addSql(`
      create or replace function analytics_rebuild(p_tenant text default null) returns bigint
      language plpgsql as $$
      declare
        rebuilt bigint;
      begin
        delete from analytics_hourly where p_tenant is null or tenant_id = p_tenant;
        create temporary table analytics_rebuild_base on commit drop as
          select tenant_id, agent_id, date_trunc('hour', created_at, 'UTC') as bucket_start,
                 (status = 'failed' or error_class is not null) as is_error,
                 case when status = 'failed' or error_class is not null then coalesce(error_class, 'unknown') end as cls,
                 analytics_sketch_index(latency_ms)::text as li,
                 analytics_sketch_index(ttft_ms)::text as ti
          from invocations
          where status in ('succeeded', 'failed') and (p_tenant is null or tenant_id = p_tenant);
        insert into analytics_hourly (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft)
        select k.tenant_id, k.agent_id, k.bucket_start, k.n, k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}')
        from (select tenant_id, agent_id, bucket_start, count(*) as n, count(*) filter (where is_error) as e
              from analytics_rebuild_base group by 1, 2, 3) as k
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(cls, n) as j
                   from (select tenant_id, agent_id, bucket_start, cls, count(*) as n from analytics_rebuild_base
                         where cls is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as c using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(li, n) as j
                   from (select tenant_id, agent_id, bucket_start, li, count(*) as n from analytics_rebuild_base
                         where li is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as l using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(ti, n) as j
                   from (select tenant_id, agent_id, bucket_start, ti, count(*) as n from analytics_rebuild_base
                         where ti is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as t using (tenant_id, agent_id, bucket_start);
        get diagnostics rebuilt = row_count;
        drop table analytics_rebuild_base;
        return rebuilt;
      end
      $$`);
    this.addSql('drop table if exists analytics_daily_summary');
    this.addSql('alter table analytics_hourly drop column if exists summary, drop column if exists summary_count');
  }
}
