import { Migration } from '@mikro-orm/migrations';
import { rollupFunction, rollupTriggers } from './Migration20261122100100_analytics.ts';
import { foldRowFunction, relostFunction, relostTrigger } from './Migration20261122170000_analytics_gateway_lost.ts';
import { rebuildWithSummaries } from './Migration20261128040000_analytics_rebuild_summaries.ts';

// The rollups are folded in batches, off the calls' path, instead of by row-level triggers in
// every completing transaction (PostgreSQL is the one resource every replica shares: the
// triggers cost it about as much CPU per streamed call as the rest of the call's statements).
// The raw rows are the truth; the rollups may lag them by a few seconds (docs/ANALYTICS.md).
//
// Which row versions are new is decided by transaction ids and snapshots, so nothing depends
// on clocks or commit order:
// - every invocation row version that matters to the rollups carries the id of the transaction
//   that wrote it (`analytics_xid`): a column default on insert, and on update a BEFORE trigger
//   whose WHEN clause fires only when a figure the rollups hold changes (turning terminal, a
//   lost stream completed after all, a charge found uncollected); pending → running updates,
//   a stream's partial charges and a charge settled as expected do not call it;
// - a fold round (analytics_fold) reads, in one statement and so one snapshot, the versions
//   whose transaction the previous round's snapshot did not see, and folds them in; the
//   snapshot is stored with the rollups in the same statement (a crash folds all or nothing);
// - a terminal row changed after it may have been folded leaves its old figures in
//   `analytics_corrections` (written by that trigger, in the changing transaction): the round
//   takes them out again if the old version was folded (its transaction visible to the
//   previous snapshot), and consumes them;
// - one round at a time, across replicas (a transaction-level advisory lock).
// Deleting invocation rows leaves the rollups as they were (history outlives the rows);
// analytics_rebuild() rebuilds from the rows there are.
//
// Revenue: a paid row is a terminal row with a payment amount whose call reached its upstream
// (attempts > 0: a payment released unused buys a later call and is counted there); its charge
// is payment_amount, which a metered call's completion sets to its charge. Uncollected: a paid
// row whose charge failed to settle (by payment_settle_error) or had no settlement configured
// (`unconfigured`). Only these payment_* columns are read, whatever the scheme.

/** A row's uncollected reason, from its settlement columns (one expression for the WHEN clause and the fold). */
const uncollectedReason = (r: string) =>
  `case when ${r}.payment_settlement = 'failed' then coalesce(${r}.payment_settle_error, 'unknown')
        when ${r}.payment_settlement = 'unconfigured' then 'unconfigured' end`;

/** The columns the rollups read from a row, in the order analytics_corrections keeps them. */
const FIGURES = `tenant_id, agent_id, created_at, status, error_class, latency_ms, ttft_ms, payment_amount, attempts,
                 payment_settlement, payment_settle_error`;

/** The columns whose change makes a terminal row's version new to the rollups. */
const CHANGED = [
  'status',
  'error_class',
  'latency_ms',
  'ttft_ms',
  'payment_amount',
  'attempts',
  'tenant_id',
  'agent_id',
  'created_at',
]
  .map((c) => `old.${c} is distinct from new.${c}`)
  .join(' or ');

export const stampTrigger = `
  create trigger invocations_analytics_stamp before update on invocations
  for each row when ((old.status in ('succeeded', 'failed') or new.status in ('succeeded', 'failed'))
                     and (${CHANGED} or (${uncollectedReason('old')}) is distinct from (${uncollectedReason('new')})))
  execute function analytics_stamp()`;

/**
 * One fold, the caller holding the fold lock. p_floor: the snapshot of a rebuild, which covers
 * what it saw of p_tenant's rows (every tenant's when null); the other rows' floor is the last
 * round's snapshot.
 */
const foldLocked = `
  create function analytics_fold_locked(p_tenant text, p_floor pg_snapshot) returns bigint
  language plpgsql as $$
  declare
    prev pg_snapshot := (select snap from analytics_fold_state);
    -- A version is new to a floor when its transaction was running then (in the snapshot's xip
    -- list) or began after it (from its xmax): two index lookups, however far back the
    -- snapshot's xmin lies (a long transaction anywhere on the server holds it back).
    from_xid xid8 := least(pg_snapshot_xmax(prev), pg_snapshot_xmax(p_floor));
    running xid8[] := array(select pg_snapshot_xip(prev)) || array(select pg_snapshot_xip(p_floor));
    folded bigint;
    e_tenant text[];
    e_agent text[];
    e_bucket timestamptz[];
  begin
    with fresh as (
      select ${FIGURES}, 1 as sign
        from invocations i
       where (i.analytics_xid >= from_xid or i.analytics_xid = any(running)) and i.status in ('succeeded', 'failed')
         and not pg_visible_in_snapshot(i.analytics_xid,
               case when p_floor is not null and (p_tenant is null or i.tenant_id = p_tenant) then p_floor else prev end)
    ),
    undone as (delete from analytics_corrections returning *),
    changes as (
      select * from fresh
      union all
      select ${FIGURES}, -1 from undone u,
             lateral (select case when p_floor is not null and (p_tenant is null or u.tenant_id = p_tenant) then p_floor else prev end as floor) f
       where not pg_visible_in_snapshot(u.xid, f.floor)
         and (u.old_xid is null or pg_visible_in_snapshot(u.old_xid, f.floor))
    ),
    facts as (
      select tenant_id, agent_id, date_trunc('hour', created_at, 'UTC') as bucket_start, sign,
             (status = 'failed' or error_class is not null) as is_error,
             case when status = 'failed' or error_class is not null then coalesce(error_class, 'unknown') end as cls,
             analytics_sketch_index(latency_ms)::text as li,
             analytics_sketch_index(ttft_ms)::text as ti,
             analytics_charge(payment_amount, attempts) as charge,
             analytics_uncollected(payment_amount, attempts, payment_settlement, payment_settle_error) as reason
        from changes
    ),
    keys as (
      select tenant_id, agent_id, bucket_start, sum(sign) as n, coalesce(sum(sign) filter (where is_error), 0) as e,
             coalesce(sum(sign) filter (where charge is not null), 0) as p, coalesce(sum(sign * charge), 0) as r,
             bool_or(sign < 0) as corrected
        from facts group by 1, 2, 3
    ),
    classes as (
      select tenant_id, agent_id, bucket_start, jsonb_object_agg(cls, n) as j
        from (select tenant_id, agent_id, bucket_start, cls, sum(sign) as n from facts where cls is not null group by 1, 2, 3, 4) s
       where n <> 0 group by 1, 2, 3
    ),
    latencies as (
      select tenant_id, agent_id, bucket_start, jsonb_object_agg(li, n) as j
        from (select tenant_id, agent_id, bucket_start, li, sum(sign) as n from facts where li is not null group by 1, 2, 3, 4) s
       where n <> 0 group by 1, 2, 3
    ),
    ttfts as (
      select tenant_id, agent_id, bucket_start, jsonb_object_agg(ti, n) as j
        from (select tenant_id, agent_id, bucket_start, ti, sum(sign) as n from facts where ti is not null group by 1, 2, 3, 4) s
       where n <> 0 group by 1, 2, 3
    ),
    lost as (
      select tenant_id, agent_id, bucket_start,
             jsonb_object_agg(reason, n) filter (where n <> 0) as counts,
             jsonb_object_agg(reason, a::text) filter (where a <> 0) as amounts
        from (select tenant_id, agent_id, bucket_start, reason, sum(sign) as n, sum(sign * charge) as a
                from facts where reason is not null group by 1, 2, 3, 4) s
       group by 1, 2, 3
    ),
    written as (
      insert into analytics_hourly as h (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft,
                                         paid, revenue, uncollected, uncollected_amount)
      select k.tenant_id, k.agent_id, k.bucket_start, k.n, k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}'),
             k.p, k.r, coalesce(u.counts, '{}'), coalesce(u.amounts, '{}')
        from keys k
        left join classes c using (tenant_id, agent_id, bucket_start)
        left join latencies l using (tenant_id, agent_id, bucket_start)
        left join ttfts t using (tenant_id, agent_id, bucket_start)
        left join lost u using (tenant_id, agent_id, bucket_start)
      on conflict (tenant_id, bucket_start, agent_id) do update set
        count = h.count + excluded.count,
        errors = h.errors + excluded.errors,
        by_error_class = analytics_add_counts(h.by_error_class, excluded.by_error_class, 1),
        latency = analytics_add_counts(h.latency, excluded.latency, 1),
        ttft = analytics_add_counts(h.ttft, excluded.ttft, 1),
        paid = h.paid + excluded.paid,
        revenue = h.revenue + excluded.revenue,
        uncollected = analytics_add_counts(h.uncollected, excluded.uncollected, 1),
        uncollected_amount = analytics_add_amounts(h.uncollected_amount, excluded.uncollected_amount),
        -- Not current any more (a correction may leave the count as it was).
        summary_count = null
      returning h.tenant_id, h.agent_id, h.bucket_start, h.count
    ),
    -- A correction may change a day's figures and not its count: its summary goes.
    forgotten as (
      delete from analytics_daily_summary d using keys k
       where k.corrected and d.tenant_id = k.tenant_id and d.agent_id = k.agent_id
         and d.day = date_trunc('day', k.bucket_start, 'UTC')
    ),
    moved as (update analytics_fold_state set snap = pg_current_snapshot(), folded_at = statement_timestamp())
    select (select count(*) from fresh),
           array(select tenant_id from written where count = 0),
           array(select agent_id from written where count = 0),
           array(select bucket_start from written where count = 0)
      into folded, e_tenant, e_agent, e_bucket;
    -- Rows all taken back out (a row that stopped being terminal): as a rebuild, no group.
    delete from analytics_hourly h
     using unnest(e_tenant, e_agent, e_bucket) as z(tenant_id, agent_id, bucket_start)
     where h.tenant_id = z.tenant_id and h.agent_id = z.agent_id and h.bucket_start = z.bucket_start and h.count = 0;
    return folded;
  end
  $$`;

const rebuild = `
  create or replace function analytics_rebuild(p_tenant text default null) returns bigint
  language plpgsql as $$
  declare
    rebuilt bigint;
    read_in pg_snapshot;
  begin
    -- No fold round meanwhile; the rows read below and the snapshot they were read in are one
    -- statement's, so the fold that follows adds exactly what changed after it.
    perform pg_advisory_xact_lock(hashtext('analytics_fold'));
    -- Stamps from another server (a database restored from a dump): ahead of every transaction
    -- here, so every round would take them for new. Rows visible to this statement cannot carry
    -- a later transaction than its snapshot's otherwise.
    if p_tenant is null then
      update invocations set analytics_xid = null where analytics_xid >= pg_snapshot_xmax(pg_current_snapshot());
      delete from analytics_corrections where xid >= pg_snapshot_xmax(pg_current_snapshot());
      update analytics_fold_state set snap = pg_current_snapshot()
       where pg_snapshot_xmax(snap) > pg_snapshot_xmax(pg_current_snapshot());
    end if;
    delete from analytics_daily_summary where p_tenant is null or tenant_id = p_tenant;
    delete from analytics_hourly where p_tenant is null or tenant_id = p_tenant;
    create temporary table analytics_rebuild_floor (snap pg_snapshot) on commit drop;
    create temporary table analytics_rebuild_base (
      tenant_id text, agent_id text, bucket_start timestamptz, is_error boolean, cls text, li integer, ti integer,
      charge numeric, reason text) on commit drop;
    with taken as (insert into analytics_rebuild_floor select pg_current_snapshot())
    insert into analytics_rebuild_base
      select tenant_id, agent_id, date_trunc('hour', created_at, 'UTC'),
             (status = 'failed' or error_class is not null),
             case when status = 'failed' or error_class is not null then coalesce(error_class, 'unknown') end,
             analytics_sketch_index(latency_ms), analytics_sketch_index(ttft_ms),
             analytics_charge(payment_amount, attempts),
             analytics_uncollected(payment_amount, attempts, payment_settlement, payment_settle_error)
      from invocations
      where status in ('succeeded', 'failed') and (p_tenant is null or tenant_id = p_tenant);
    read_in := (select snap from analytics_rebuild_floor);
    insert into analytics_hourly (tenant_id, agent_id, bucket_start, count, errors, by_error_class, latency, ttft,
                                  paid, revenue, uncollected, uncollected_amount, summary, summary_count)
    select k.tenant_id, k.agent_id, k.bucket_start, k.n, k.e, coalesce(c.j, '{}'), coalesce(l.j, '{}'), coalesce(t.j, '{}'),
           k.p, k.r, coalesce(u.counts, '{}'), coalesce(u.amounts, '{}'), analytics_summary(k.lp, k.tp), k.n
    from (select tenant_id, agent_id, bucket_start, count(*) as n, count(*) filter (where is_error) as e,
                 count(*) filter (where charge is not null) as p, coalesce(sum(charge), 0) as r,
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
                     where ti is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as t using (tenant_id, agent_id, bucket_start)
    left join (select tenant_id, agent_id, bucket_start, jsonb_object_agg(reason, n) as counts,
                      jsonb_object_agg(reason, a::text) filter (where a <> 0) as amounts
               from (select tenant_id, agent_id, bucket_start, reason, count(*) as n, sum(charge) as a from analytics_rebuild_base
                     where reason is not null group by 1, 2, 3, 4) as s group by 1, 2, 3) as u using (tenant_id, agent_id, bucket_start);
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
    drop table analytics_rebuild_floor;
    -- What changed after the rows were read, and every other tenant's rows not folded yet.
    perform analytics_fold_locked(p_tenant, read_in);
    return rebuilt;
  end
  $$`;

export class Migration20261206160000_analytics_fold extends Migration {
  override up(): void {
    // A busy invocations table must not queue every call behind this change.
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table analytics_hourly
      add column paid bigint not null default 0,
      add column revenue numeric not null default 0,
      add column uncollected jsonb not null default '{}',
      add column uncollected_amount jsonb not null default '{}'`);
    // Null on the rows already there (the triggers folded them); a default set afterwards, so
    // adding the column rewrites nothing.
    this.addSql(`alter table invocations add column analytics_xid xid8 null`);
    this.addSql(`alter table invocations alter column analytics_xid set default pg_current_xact_id()`);
    // Its index, invocations_analytics_xid, is built without blocking the table's writes by
    // Migration20261206180000_concurrent_indexes (this one created it before).
    this.addSql(`
      create table analytics_corrections (
        xid xid8 not null default pg_current_xact_id(),
        old_xid xid8 null,
        tenant_id text not null,
        agent_id text not null,
        created_at timestamptz not null,
        status text not null,
        error_class text null,
        latency_ms bigint null,
        ttft_ms bigint null,
        payment_amount text null,
        attempts integer null,
        payment_settlement text null,
        payment_settle_error text null
      )`);
    this.addSql(`
      create table analytics_fold_state (
        id boolean primary key default true check (id),
        snap pg_snapshot not null,
        folded_at timestamptz not null
      )`);
    this.addSql(`insert into analytics_fold_state (snap, folded_at) values (pg_current_snapshot(), now())`);

    // A paid row's charge: its amount when its call reached the upstream; null otherwise (and
    // for an amount that is not a decimal integer, which no payment path writes).
    this.addSql(`
      create function analytics_charge(amount text, attempts integer) returns numeric
      language sql immutable parallel safe as $$
        select case when attempts > 0 and amount ~ '^[0-9]{1,78}$' then amount::numeric end
      $$`);
    this.addSql(`
      create function analytics_uncollected(amount text, attempts integer, settlement text, settle_error text) returns text
      language sql immutable parallel safe as $$
        select case when analytics_charge(amount, attempts) is not null then
          case when settlement = 'failed' then coalesce(settle_error, 'unknown')
               when settlement = 'unconfigured' then 'unconfigured' end end
      $$`);
    // Adds a key -> amount map (decimal strings: amounts are uint256, beyond JSON numbers) into
    // another; a key taken back to zero goes.
    this.addSql(`
      create function analytics_add_amounts(acc jsonb, delta jsonb) returns jsonb
      language plpgsql immutable parallel safe as $$
      declare
        k text;
        v text;
        total numeric;
      begin
        for k, v in select key, value from jsonb_each_text(delta) loop
          total := coalesce((acc ->> k)::numeric, 0) + v::numeric;
          acc := case when total = 0 then acc - k else jsonb_set(acc, array[k], to_jsonb(total::text)) end;
        end loop;
        return acc;
      end
      $$`);

    this.addSql(`
      create function analytics_stamp() returns trigger
      language plpgsql as $$
      begin
        new.analytics_xid := pg_current_xact_id();
        if old.status in ('succeeded', 'failed') then
          insert into analytics_corrections (old_xid, ${FIGURES})
          values (old.analytics_xid, old.tenant_id, old.agent_id, old.created_at, old.status, old.error_class,
                  old.latency_ms, old.ttft_ms, old.payment_amount, old.attempts, old.payment_settlement, old.payment_settle_error);
        end if;
        return new;
      end
      $$`);
    this.addSql('drop trigger if exists invocations_analytics_relost on invocations');
    this.addSql('drop trigger if exists invocations_analytics_complete on invocations');
    this.addSql('drop trigger if exists invocations_analytics_insert on invocations');
    this.addSql('drop function if exists analytics_rollup_relost()');
    this.addSql('drop function if exists analytics_fold_row(invocations, integer)');
    this.addSql('drop function if exists analytics_rollup()');
    this.addSql(stampTrigger);

    this.addSql(foldLocked);
    this.addSql(`
      create function analytics_fold(p_wait boolean default false) returns bigint
      language plpgsql as $$
      begin
        if p_wait then
          perform pg_advisory_xact_lock(hashtext('analytics_fold'));
        elsif not pg_try_advisory_xact_lock(hashtext('analytics_fold')) then
          return null;
        end if;
        -- Transaction ids are the server's: state written by another server (a database restored
        -- from a dump) is ahead of every transaction here, and folding by it would miss rows and
        -- fold others again. The round fails, visibly, until a rebuild starts over.
        if pg_snapshot_xmax((select snap from analytics_fold_state)) > pg_snapshot_xmax(pg_current_snapshot()) then
          raise exception 'analytics fold state is ahead of this server''s transactions (restored from another server?): run select analytics_rebuild()';
        end if;
        return analytics_fold_locked(null, null);
      end
      $$`);
    this.addSql(rebuild);
    // The revenue of the paid rows there are (the triggers kept every other figure), not a whole
    // rebuild: the table lock taken above keeps every call out until this commits.
    this.addSql(`
      with paid as (
        select tenant_id, agent_id, date_trunc('hour', created_at, 'UTC') as bucket_start,
               analytics_charge(payment_amount, attempts) as charge,
               analytics_uncollected(payment_amount, attempts, payment_settlement, payment_settle_error) as reason
          from invocations
         where status in ('succeeded', 'failed') and payment_amount is not null
      ),
      lost as (
        select tenant_id, agent_id, bucket_start, jsonb_object_agg(reason, n) as counts,
               jsonb_object_agg(reason, a::text) filter (where a <> 0) as amounts
          from (select tenant_id, agent_id, bucket_start, reason, count(*) as n, sum(charge) as a
                  from paid where reason is not null group by 1, 2, 3, 4) s
         group by 1, 2, 3
      ),
      keys as (
        select tenant_id, agent_id, bucket_start, count(*) filter (where charge is not null) as p, coalesce(sum(charge), 0) as r
          from paid group by 1, 2, 3
      )
      update analytics_hourly h
         set paid = k.p, revenue = k.r, uncollected = coalesce(u.counts, '{}'), uncollected_amount = coalesce(u.amounts, '{}')
        from keys k left join lost u using (tenant_id, agent_id, bucket_start)
       where h.tenant_id = k.tenant_id and h.agent_id = k.agent_id and h.bucket_start = k.bucket_start`);
  }

  override down(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    // Everything folded, and nothing changing until the triggers are back.
    this.addSql(`lock table invocations in exclusive mode`);
    this.addSql(`select analytics_fold(true)`);
    this.addSql('drop trigger if exists invocations_analytics_stamp on invocations');
    this.addSql('drop function if exists analytics_stamp()');
    this.addSql(rollupFunction);
    for (const trigger of rollupTriggers) this.addSql(trigger);
    this.addSql(foldRowFunction);
    this.addSql(relostFunction);
    this.addSql(relostTrigger);
    this.addSql(rebuildWithSummaries);
    this.addSql('drop function if exists analytics_fold(boolean)');
    this.addSql('drop function if exists analytics_fold_locked(text, pg_snapshot)');
    this.addSql('drop function if exists analytics_add_amounts(jsonb, jsonb)');
    this.addSql('drop function if exists analytics_uncollected(text, integer, text, text)');
    this.addSql('drop function if exists analytics_charge(text, integer)');
    this.addSql('drop table if exists analytics_fold_state');
    this.addSql('drop table if exists analytics_corrections');
    this.addSql('drop index if exists invocations_analytics_xid');
    this.addSql('alter table invocations drop column if exists analytics_xid');
    this.addSql(`alter table analytics_hourly
      drop column if exists paid, drop column if exists revenue,
      drop column if exists uncollected, drop column if exists uncollected_amount`);
  }
}
