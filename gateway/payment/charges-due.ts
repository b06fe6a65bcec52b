// The metered calls whose charge is still due a while after they completed, leased for the
// due-charges round (temporal/charges-due.ts), which starts their MeteredChargeWorkflow, a fair
// share of each round per tenant. The lease keeps two API processes from starting one charge at
// once, and a started one from being started again before its workflow had a chance to settle it.
import type { MikroORM } from '@mikro-orm/postgresql';

export type DueCharge = {
  invocationId: string;
  tenantId: string;
  mode: 'transactional' | 'streaming';
  agent: { id: string; name: string; emitReceipts: boolean };
};

// What makes a row's charge due: the predicate of the partial index invocations_charges_due_tenant
// (tenant_id, completed_at), spelled the same everywhere so each read below uses it.
const DUE = `payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')
  and status in ('succeeded', 'failed')`;

// Fair between tenants: the tenants with a charge due are found by a skip scan of the index (one
// probe per tenant, however many charges each has), then each gives at most `perTenant` of its
// oldest unleased charges old enough, and the batch is the oldest of those. A tenant with
// thousands of charges due takes `perTenant` places of a round, never the whole batch: a
// tenant with one charge due is leased in the first round that has room for it.
//
// A row the lost-stream sweep closed (`gateway_lost`) waits longer: the sweep's verdict is a
// guess, and a process that was alive after all completes its row with the whole charge within
// seconds. Not once its answer's end (stream_ends_by) has passed: its authorization lapses two
// minutes after that, so it is charged what was measured now rather than the whole later. Rows of
// deleted agents are charged too (the agent's name is only the workflow's summary).
const LEASE = `
  with recursive due_tenants as (
    (select tenant_id from invocations where ${DUE} order by tenant_id limit 1)
    union all
    select (select i.tenant_id from invocations i
             where ${DUE} and i.tenant_id > d.tenant_id order by i.tenant_id limit 1)
      from due_tenants d where d.tenant_id is not null
  ),
  picked as (
    select c.id, c.completed_at from due_tenants d cross join lateral (
      select id, completed_at from invocations
       where tenant_id = d.tenant_id and ${DUE}
         and completed_at < now() - make_interval(secs => (case
               when mode = 'transactional' then ?
               when error_class = 'gateway_lost' and not coalesce(stream_ends_by < now(), false) then ?
               else ? end) / 1000.0)
         and (charge_lease_until is null or charge_lease_until < now())
       order by completed_at limit ? for update skip locked) c
     where d.tenant_id is not null
     order by c.completed_at limit ?
  )
  update invocations i set charge_lease_until = now() + make_interval(secs => ? / 1000.0)
   where i.id in (select id from picked)
  returning i.id, i.tenant_id, i.agent_id, i.mode,
            (select a.name from agents a where a.id = i.agent_id) as agent_name,
            coalesce((select a.emit_receipts from agents a where a.id = i.agent_id), false) as emit_receipts`;

type Leased = {
  id: string;
  tenant_id: string;
  agent_id: string;
  mode: DueCharge['mode'];
  agent_name: string | null;
  emit_receipts: boolean;
};

export async function leaseDueCharges(
  orm: MikroORM,
  opts: {
    leaseMs: number;
    streamedAfterMs: number;
    lostAfterMs: number;
    transactionalAfterMs: number;
    batch: number;
    /** The most charges of one tenant in one batch. */
    perTenant: number;
  },
): Promise<DueCharge[]> {
  const rows = await orm.em
    .getConnection()
    .execute<Leased[]>(LEASE, [
      opts.transactionalAfterMs,
      opts.lostAfterMs,
      opts.streamedAfterMs,
      opts.perTenant,
      opts.batch,
      opts.leaseMs,
    ]);
  return rows.map((r) => ({
    invocationId: r.id,
    tenantId: r.tenant_id,
    mode: r.mode,
    agent: { id: r.agent_id, name: r.agent_name ?? r.agent_id, emitReceipts: r.emit_receipts },
  }));
}
