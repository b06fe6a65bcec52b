import { Migration } from '@mikro-orm/migrations';

// A streaming row the stale-stream sweep failed as `gateway_lost` may later be completed by its
// own process (gateway/invocations/stream-records.ts): the sweep's verdict was a guess (the owner's lock was
// free because only its row connection broke). The rollup trigger folded the guess in when the
// row turned terminal; this trigger takes it back out and folds the truth in, so the rollups
// keep matching the rows (and analytics_rebuild()).
//
// Row-level, with the condition in WHEN, like the rollup triggers: no function call for any
// other update. (Statement-level triggers with transition tables were measured here as a way to
// fold a batch of streaming completions in one upsert: on the transactional path's single-row
// statements they cost 2-4x the row-level triggers, ~0.2-0.6 ms of database time per call.)
// The re-fold of a row the sweep failed as gateway_lost, exported for the migration that replaced
// it by the batched fold (Migration20261206160000_analytics_fold), whose down() restores it.
export const foldRowFunction = `
      create function analytics_fold_row(r invocations, sign integer) returns void
      language plpgsql as $$
      declare
        cls text := case when r.status = 'failed' or r.error_class is not null then coalesce(r.error_class, 'unknown') end;
        li text := analytics_sketch_index(r.latency_ms)::text;
        ti text := analytics_sketch_index(r.ttft_ms)::text;
        one_class jsonb := case when cls is null then '{}'::jsonb else jsonb_build_object(cls, 1) end;
        one_latency jsonb := case when li is null then '{}'::jsonb else jsonb_build_object(li, 1) end;
        one_ttft jsonb := case when ti is null then '{}'::jsonb else jsonb_build_object(ti, 1) end;
      begin
        insert into analytics_hourly as h (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft)
        values (r.tenant_id, r.agent_id, date_trunc('hour', r.created_at, 'UTC'), sign, sign * (cls is not null)::int,
                analytics_add_counts('{}', one_class, sign), analytics_add_counts('{}', one_latency, sign), analytics_add_counts('{}', one_ttft, sign))
        on conflict (tenant_id, bucket_start, agent_id) do update set
          count = h.count + excluded.count,
          errors = h.errors + excluded.errors,
          by_error_class = analytics_add_counts(h.by_error_class, one_class, sign),
          latency = analytics_add_counts(h.latency, one_latency, sign),
          ttft = analytics_add_counts(h.ttft, one_ttft, sign);
      end
      $$`;

export const relostFunction = `
      create function analytics_rollup_relost() returns trigger
      language plpgsql as $$
      begin
        perform analytics_fold_row(old, -1);
        perform analytics_fold_row(new, 1);
        return null;
      end
      $$`;

export const relostTrigger = `
      create trigger invocations_analytics_relost after update on invocations
      for each row when (old.status = 'failed' and old.error_class = 'gateway_lost'
                         and new.status in ('succeeded', 'failed') and new.error_class is distinct from 'gateway_lost')
      execute function analytics_rollup_relost()`;

export class Migration20261122170000_analytics_gateway_lost extends Migration {
  override up(): void {
    // Adds `delta` (a key -> count map) into `acc`, `sign` times. A key taken back to zero
    // goes, as analytics_rebuild() would never have written it.
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

    // Folds one terminal row into its hourly rollup (sign 1) or takes it out (-1).
    this.addSql(foldRowFunction);

    this.addSql(relostFunction);

    this.addSql(relostTrigger);
  }

  override down(): void {
    this.addSql('drop trigger if exists invocations_analytics_relost on invocations');
    this.addSql('drop function if exists analytics_rollup_relost()');
    this.addSql('drop function if exists analytics_fold_row(invocations, integer)');
    this.addSql('drop function if exists analytics_add_counts(jsonb, jsonb, integer)');
  }
}
