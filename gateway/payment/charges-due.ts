// The metered calls whose charge is still due a while after they completed, leased for the
// due-charges round (temporal/charges-due.ts), which starts their MeteredChargeWorkflow. The
// lease keeps two API processes from starting one charge at once, and a started one from being
// started again before its workflow had a chance to settle it.
import type { MikroORM } from '@mikro-orm/postgresql';

export type DueCharge = {
  invocationId: string;
  tenantId: string;
  agent: { id: string; name: string; emitReceipts: boolean };
};

// Reads the partial index invocations_charges_due.
const LEASE = `
  update invocations i set charge_lease_until = now() + make_interval(secs => ? / 1000.0)
    from agents a
   where i.id in (select id from invocations
                   where payment_scheme is not null and payment_settlement is null
                     and status in ('succeeded', 'failed')
                     and completed_at < now() - make_interval(secs => (case when mode = 'streaming' then ? else ? end) / 1000.0)
                     and (charge_lease_until is null or charge_lease_until < now())
                   order by completed_at limit ? for update skip locked)
     and a.id = i.agent_id
  returning i.id, i.tenant_id, i.agent_id, a.name as agent_name, a.emit_receipts`;

type Leased = { id: string; tenant_id: string; agent_id: string; agent_name: string; emit_receipts: boolean };

export async function leaseDueCharges(
  orm: MikroORM,
  opts: { leaseMs: number; streamedAfterMs: number; transactionalAfterMs: number; batch: number },
): Promise<DueCharge[]> {
  const rows = await orm.em
    .getConnection()
    .execute<Leased[]>(LEASE, [opts.leaseMs, opts.streamedAfterMs, opts.transactionalAfterMs, opts.batch]);
  return rows.map((r) => ({
    invocationId: r.id,
    tenantId: r.tenant_id,
    agent: { id: r.agent_id, name: r.agent_name, emitReceipts: r.emit_receipts },
  }));
}
