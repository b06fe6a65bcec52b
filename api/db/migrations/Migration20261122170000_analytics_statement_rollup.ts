import { Migration } from '@mikro-orm/migrations';

// The analytics rollup folds a whole statement's completed rows at once instead of one row at
// a time. Streaming completions are written in batches (api/proxy/records.ts); with a per-row
// trigger a batch of N completions of one agent rewrote that agent's hourly rollup row (and its
// histograms, copied whole by every jsonb_set) N times in one transaction: N dead versions per
// batch, each taking the row lock again, which made the rollup row the slowest part of a busy
// agent's writes. Statement-level triggers with transition tables group the statement's rows by
// (tenant, hour, agent) and apply one upsert per group, adding only the histogram keys that
// moved. Exactly the same sums as before (test/analytics.test.ts compares the trigger's rollups
// with analytics_rebuild()).
//
// A row the stale-stream sweep failed as `gateway_lost` may later be completed by its own
// process (records.ts): the update trigger then takes the guess back out (-1) and folds the
// truth in (+1), so the rollups keep matching the rows.
export class Migration20261122170000_analytics_statement_rollup extends Migration {
  override up(): void {
    // Adds `delta` (a key -> count map) into `acc`, `sign` times; one jsonb_set per key that moved.
    // A key taken back to zero goes, as analytics_rebuild() would never have written it.
    this.addSql(`
      create function analytics_add_counts(acc jsonb, delta jsonb, sign integer) returns jsonb
      language plpgsql immutable parallel safe as $$
      declare
        k text;
        v text;
        total bigint;
      begin
        for k, v in select key, value from jsonb_each_text(delta) loop
          total := coalesce((acc ->> k)::bigint, 0) + sign * v::bigint;
          acc := case when total = 0 then acc - k else jsonb_set(acc, array[k], to_jsonb(total)) end;
        end loop;
        return acc;
      end
      $$`);

    // Folds terminal invocation rows into their hourly rollups (sign 1) or takes them out (-1).
    this.addSql(`
      create function analytics_fold(done invocations[], sign integer) returns void
      language sql as $$
        with base as (
          select r.tenant_id, r.agent_id, date_trunc('hour', r.created_at, 'UTC') as bucket_start,
                 (r.status = 'failed' or r.error_class is not null) as is_error,
                 case when r.status = 'failed' or r.error_class is not null then coalesce(r.error_class, 'unknown') end as cls,
                 analytics_sketch_index(r.latency_ms)::text as li,
                 analytics_sketch_index(r.ttft_ms)::text as ti
          from unnest(done) as r
        )
        insert into analytics_hourly as h (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft)
        select k.tenant_id, k.agent_id, k.bucket_start, sign * k.n, sign * k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}')
        from (select tenant_id, agent_id, bucket_start, count(*) as n, count(*) filter (where is_error) as e
              from base group by 1, 2, 3) as k
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(cls, n) as j
                   from (select tenant_id, agent_id, bucket_start, cls, count(*) as n from base
                         where cls is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as c using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(li, n) as j
                   from (select tenant_id, agent_id, bucket_start, li, count(*) as n from base
                         where li is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as l using (tenant_id, agent_id, bucket_start)
        left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(ti, n) as j
                   from (select tenant_id, agent_id, bucket_start, ti, count(*) as n from base
                         where ti is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as t using (tenant_id, agent_id, bucket_start)
        on conflict (tenant_id, bucket_start, agent_id) do update set
          count = h.count + excluded.count,
          errors = h.errors + excluded.errors,
          by_error_class = analytics_add_counts(h.by_error_class, excluded.by_error_class, sign),
          latency = analytics_add_counts(h.latency, excluded.latency, sign),
          ttft = analytics_add_counts(h.ttft, excluded.ttft, sign)
      $$`);

    this.addSql(`
      create function analytics_rollup_inserted() returns trigger
      language plpgsql as $$
      declare
        done invocations[] := array(select n from inserted_rows as n where n.status in ('succeeded', 'failed'));
      begin
        if cardinality(done) > 0 then perform analytics_fold(done, 1); end if;
        return null;
      end
      $$`);

    this.addSql(`
      create function analytics_rollup_updated() returns trigger
      language plpgsql as $$
      declare
        retracted invocations[];
        done invocations[];
      begin
        -- Most updates change no status to terminal (pending -> running, receipts, owners).
        if not exists (select 1 from new_rows as n where n.status in ('succeeded', 'failed')) then return null; end if;
        retracted := array(
          select o from old_rows as o join new_rows as n using (id)
          where o.status = 'failed' and o.error_class = 'gateway_lost' and n.error_class is distinct from 'gateway_lost' and n.status in ('succeeded', 'failed'));
        done := array(
          select n from new_rows as n join old_rows as o using (id)
          where n.status in ('succeeded', 'failed')
            and (o.status not in ('succeeded', 'failed')
                 or (o.status = 'failed' and o.error_class = 'gateway_lost' and n.error_class is distinct from 'gateway_lost')));
        if cardinality(retracted) > 0 then perform analytics_fold(retracted, -1); end if;
        if cardinality(done) > 0 then perform analytics_fold(done, 1); end if;
        return null;
      end
      $$`);

    this.addSql('drop trigger if exists invocations_analytics_insert on invocations');
    this.addSql('drop trigger if exists invocations_analytics_complete on invocations');
    this.addSql(`
      create trigger invocations_analytics_insert after insert on invocations
      referencing new table as inserted_rows
      for each statement execute function analytics_rollup_inserted()`);
    // Transition tables allow no column list (UPDATE OF status): every update statement on
    // invocations calls it, and it returns at once unless some row turned terminal.
    this.addSql(`
      create trigger invocations_analytics_complete after update on invocations
      referencing old table as old_rows new table as new_rows
      for each statement execute function analytics_rollup_updated()`);
  }

  override down(): void {
    this.addSql('drop trigger if exists invocations_analytics_complete on invocations');
    this.addSql('drop trigger if exists invocations_analytics_insert on invocations');
    this.addSql(`
      create trigger invocations_analytics_insert after insert on invocations
      for each row when (new.status in ('succeeded', 'failed'))
      execute function analytics_rollup()`);
    this.addSql(`
      create trigger invocations_analytics_complete after update of status on invocations
      for each row when (new.status in ('succeeded', 'failed') and old.status not in ('succeeded', 'failed'))
      execute function analytics_rollup()`);
    this.addSql('drop function if exists analytics_rollup_updated()');
    this.addSql('drop function if exists analytics_rollup_inserted()');
    this.addSql('drop function if exists analytics_fold(invocations[], integer)');
    this.addSql('drop function if exists analytics_add_counts(jsonb, jsonb, integer)');
  }
}
