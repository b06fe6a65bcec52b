import { Migration } from '@mikro-orm/migrations';

// The row-level rollup, exported for the migration that replaced it by the batched fold
// (Migration20261206160000_analytics_fold), whose down() restores it, and for the proxy bench,
// which measures it beside the fold in the same run.
export const rollupFunction = `
      create function analytics_rollup() returns trigger
      language plpgsql as $$
      declare
        is_error boolean := new.status = 'failed' or new.error_class is not null;
        cls text := case when new.status = 'failed' or new.error_class is not null then coalesce(new.error_class, 'unknown') end;
        li text := analytics_sketch_index(new.latency_ms)::text;
        ti text := analytics_sketch_index(new.ttft_ms)::text;
      begin
        insert into analytics_hourly as h (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft)
        values (
          new.tenant_id, new.agent_id, date_trunc('hour', new.created_at, 'UTC'), 1, is_error::int,
          case when cls is null then '{}'::jsonb else jsonb_build_object(cls, 1) end,
          case when li is null then '{}'::jsonb else jsonb_build_object(li, 1) end,
          case when ti is null then '{}'::jsonb else jsonb_build_object(ti, 1) end)
        on conflict (tenant_id, bucket_start, agent_id) do update set
          count = h.count + 1,
          errors = h.errors + excluded.errors,
          by_error_class = case when cls is null then h.by_error_class
            else jsonb_set(h.by_error_class, array[cls], to_jsonb(coalesce((h.by_error_class ->> cls)::bigint, 0) + 1)) end,
          latency = case when li is null then h.latency
            else jsonb_set(h.latency, array[li], to_jsonb(coalesce((h.latency ->> li)::bigint, 0) + 1)) end,
          ttft = case when ti is null then h.ttft
            else jsonb_set(h.ttft, array[ti], to_jsonb(coalesce((h.ttft ->> ti)::bigint, 0) + 1)) end;
        return null;
      end
      $$`;

export const rollupTriggers = [
  `
      create trigger invocations_analytics_insert after insert on invocations
      for each row when (new.status in ('succeeded', 'failed'))
      execute function analytics_rollup()`,
  `
      create trigger invocations_analytics_complete after update of status on invocations
      for each row when (new.status in ('succeeded', 'failed') and old.status not in ('succeeded', 'failed'))
      execute function analytics_rollup()`,
];

// Analytics rollups: one row per (tenant, hour, agent) holding counts, errors by class and
// two mergeable histograms (latency, TTFT). A trigger on `invocations` folds each row in at
// the moment it becomes terminal, in the same transaction, whichever code path completes it
// (workflow activity or streaming route). Daily figures merge 24 hourly histograms, so they
// are true daily percentiles, never averages of hourly ones. gateway/analytics/sketch.ts is the
// reading half of analytics_sketch_index and must stay in step with it.
export class Migration20261122100100_analytics extends Migration {
  override up(): void {
    this.addSql(`
      create table analytics_hourly (
        tenant_id text not null,
        agent_id text not null,
        bucket_start timestamptz not null,
        count bigint not null default 0,
        errors bigint not null default 0,
        by_error_class jsonb not null default '{}',
        latency jsonb not null default '{}',
        ttft jsonb not null default '{}',
        primary key (tenant_id, bucket_start, agent_id)
      )`);

    // Log-linear histogram bucket (HDR-style): values below 128 exact; above, 64 buckets per
    // power of two, so a bucket is at most 1/64 of its lower bound wide and the reported
    // midpoint is within 1/128 (0.8 %) of any value in it. 64 - position of the first 1 bit
    // is floor(log2(v)) computed exactly, with no floating point.
    this.addSql(`
      create function analytics_sketch_index(v bigint) returns integer
      language sql immutable parallel safe as $$
        select case
          when v is null then null
          when v < 128 then greatest(v, 0)::integer
          else (select (128 + (e - 7) * 64 + ((v >> (e - 6)) - 64))::integer
                from (select 64 - position('1' in v::bit(64)::text) as e) as s)
        end
      $$`);

    this.addSql(rollupFunction);
    // Two triggers so the WHEN clauses (evaluated without calling the function) skip the
    // pending → running updates; a row is folded in exactly once, when it turns terminal.
    for (const trigger of rollupTriggers) this.addSql(trigger);

    // Rebuilds the rollups from the invocation rows (all tenants, or one): the backfill below,
    // and an operator's repair tool. Produces exactly what the trigger would have.
    this.addSql(`
      create function analytics_rebuild(p_tenant text default null) returns bigint
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
    // Invocations completed before this migration: the triggers above already hold their
    // lock on the table, so nothing completes twice or slips between backfill and trigger.
    this.addSql(`select analytics_rebuild()`);
  }

  override down(): void {
    this.addSql('drop trigger if exists invocations_analytics_complete on invocations');
    this.addSql('drop trigger if exists invocations_analytics_insert on invocations');
    this.addSql('drop function if exists analytics_rebuild(text)');
    this.addSql('drop function if exists analytics_rollup()');
    this.addSql('drop function if exists analytics_sketch_index(bigint)');
    this.addSql('drop table if exists analytics_hourly');
  }
}
