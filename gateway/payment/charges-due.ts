// The metered calls whose charge is still due a while after they completed, leased for the
// due-charges round (temporal/charges-due.ts), which starts their MeteredChargeWorkflow. The
// lease keeps two API processes from starting one charge at once, and a started one from being
// started again before its workflow had a chance to settle it.
import type { MikroORM } from '@mikro-orm/postgresql';

export type DueCharge = {
  invocationId: string;
  tenantId: string;
  mode: 'transactional' | 'streaming';
  agent: { id: string; name: string; emitReceipts: boolean };
};

// Reads the partial index invocations_charges_due. A row the lost-stream sweep closed
// (`gateway_lost`) waits longer: the sweep's verdict is a guess, and a process that was alive
// after all completes its row with the whole charge within seconds. Not once its answer's end
// (stream_ends_by) has passed: its authorization lapses two minutes after that, so it is charged
// what was measured now rather than the whole later. Rows of deleted agents are
// charged too (the agent's name is only the workflow's summary).
const LEASE = `
  update invocations i set charge_lease_until = now() + make_interval(secs => ? / 1000.0)
   where i.id in (select id from invocations
                   where payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')
                     and status in ('succeeded', 'failed')
                     and completed_at < now() - make_interval(secs => (case
                           when mode = 'transactional' then ?
                           when error_class = 'gateway_lost' and not coalesce(stream_ends_by < now(), false) then ?
                           else ? end) / 1000.0)
                     and (charge_lease_until is null or charge_lease_until < now())
                   order by completed_at limit ? for update skip locked)
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
  opts: { leaseMs: number; streamedAfterMs: number; lostAfterMs: number; transactionalAfterMs: number; batch: number },
): Promise<DueCharge[]> {
  const rows = await orm.em
    .getConnection()
    .execute<Leased[]>(LEASE, [
      opts.leaseMs,
      opts.transactionalAfterMs,
      opts.lostAfterMs,
      opts.streamedAfterMs,
      opts.batch,
    ]);
  return rows.map((r) => ({
    invocationId: r.id,
    tenantId: r.tenant_id,
    mode: r.mode,
    agent: { id: r.agent_id, name: r.agent_name ?? r.agent_id, emitReceipts: r.emit_receipts },
  }));
}
