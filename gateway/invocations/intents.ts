// The intents to start InvocationWorkflow: a transactional row `pending` that no start is
// known to have reached. These are the start relay's statements over them (temporal/start-relay.ts
// runs them with Temporal): lease a batch (two relays never take one row), mark what was
// started, give back the leases of what was not, and tell which held calls are known started.
// Also the closed-workflow check's lease (temporal/unfinished-calls.ts): the calls started
// but still unfinished a while later, whose workflows it asks about. The two never lease the
// same row (unstarted intents are the relay's), so they share the lease column.
import type { MikroORM } from '@mikro-orm/postgresql';

export type Intent = { id: string; tenant_id: string; agent_id: string; agent_name: string; emit_receipts: boolean };

/** Leases a batch of unstarted intents older than `afterMs` (none another relay holds). */
const LEASE = `
  update invocations i set start_lease_until = now() + make_interval(secs => ? / 1000.0)
    from agents a
   where i.id in (select id from invocations
                   where status = 'pending' and mode = 'transactional' and workflow_started_at is null
                     and created_at < now() - make_interval(secs => ? / 1000.0)
                     and (start_lease_until is null or start_lease_until < now())
                   order by created_at limit ? for update skip locked)
     and a.id = i.agent_id
  returning i.id, i.tenant_id, i.agent_id, a.name as agent_name, a.emit_receipts`;

const MARK_STARTED = `update invocations set workflow_started_at = now(), start_lease_until = null where id in (select jsonb_array_elements_text(?::jsonb))`;
const DROP_LEASE = `update invocations set start_lease_until = null where id in (select jsonb_array_elements_text(?::jsonb)) and workflow_started_at is null`;
/** The held calls whose start is known now: started by a relay, moved by their workflow, or gone. */
const KNOWN_STARTED = `
  select held.id from jsonb_array_elements_text(?::jsonb) as held(id)
   where not exists (select 1 from invocations i where i.id = held.id and i.status = 'pending' and i.workflow_started_at is null)`;
/** Started (or running) calls unmoved for `afterMs`, none another check holds: their workflows are asked about. */
const LEASE_UNFINISHED = `
  update invocations set start_lease_until = now() + make_interval(secs => ? / 1000.0)
   where id in (select id from invocations
                 where status in ('pending', 'running') and mode = 'transactional'
                   and (status = 'running' or workflow_started_at is not null)
                   and updated_at < now() - make_interval(secs => ? / 1000.0)
                   and (start_lease_until is null or start_lease_until < now())
                 order by updated_at limit ? for update skip locked)
  returning id`;

/** Ids travel as one JSON array parameter. */
const ids = (list: string[]) => [JSON.stringify(list)];

/** Leases up to `batch` unstarted intents older than `afterMs` for `leaseMs`; returns them with their agents. */
export function leaseIntents(
  orm: MikroORM,
  opts: { leaseMs: number; afterMs: number; batch: number },
): Promise<Intent[]> {
  return orm.em.getConnection().execute<Intent[]>(LEASE, [opts.leaseMs, opts.afterMs, opts.batch]);
}

export async function markStarted(orm: MikroORM, started: string[]): Promise<void> {
  await orm.em.getConnection().execute(MARK_STARTED, ids(started));
}

export async function dropLeases(orm: MikroORM, unstarted: string[]): Promise<void> {
  await orm.em.getConnection().execute(DROP_LEASE, ids(unstarted));
}

/** Of `held`, the calls whose start is known now: started by a relay, moved by their workflow, or gone. */
export async function knownStarted(orm: MikroORM, held: string[]): Promise<string[]> {
  const rows = await orm.em.getConnection().execute<Array<{ id: string }>>(KNOWN_STARTED, ids(held));
  return rows.map((row) => row.id);
}

/**
 * Leases up to `batch` started calls unmoved for `afterMs`, for `leaseMs`: a call whose
 * workflow is still running is asked about again once its lease has run out.
 */
export async function leaseUnfinished(
  orm: MikroORM,
  opts: { leaseMs: number; afterMs: number; batch: number },
): Promise<string[]> {
  const rows = await orm.em
    .getConnection()
    .execute<Array<{ id: string }>>(LEASE_UNFINISHED, [opts.leaseMs, opts.afterMs, opts.batch]);
  return rows.map((row) => row.id);
}
