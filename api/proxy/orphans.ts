// Closes transactional rows an API process left `pending` when it died between the row's
// commit and its workflow's start (the two run side by side, api/routes/proxy.ts). Such a call
// was never accepted — the caller got no 202, nothing was sent — but no workflow will ever
// move its row, which would otherwise read `pending` forever (found by `npm run chaos --
// worker-kill`, docs/CHAOS.md). Each API process sweeps once, a while after it starts: by then
// the previous process's orphans are older than any start could take, and a row is closed
// only when Temporal has no running workflow with its id: none at all, or one that was closed
// without moving it (terminated after a start that failed in front of the caller whose row
// could not be removed, api/routes/proxy.ts).
import type { MikroORM } from '@mikro-orm/postgresql';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from '../../lib/log.ts';
import { releasingPayments } from '../../gateway/payment/claims.ts';

/** Older than any workflow start could take (a start gives up after START_DEADLINE_MS, api/proxy/start.ts). */
export const ORPHAN_AGE_MS = 2 * 60_000;

/** Fails the pending transactional rows created before `olderThan` that have no running workflow; returns how many. */
export async function closeOrphanedInvocations(
  orm: MikroORM,
  temporal: Client,
  olderThan: Date,
  limit = 1_000,
): Promise<number> {
  const conn = orm.em.getConnection();
  const rows = await conn.execute<Array<{ id: string }>>(
    `select id from invocations where status = 'pending' and mode = 'transactional' and created_at < ? order by created_at limit ?`,
    [olderThan, limit],
  );
  let closed = 0;
  for (const { id } of rows) {
    try {
      const { status } = await temporal.workflow.getHandle(id).describe();
      if (status.name === 'RUNNING') continue; // perhaps waiting for a worker: it will complete the row
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
    // Its payment, if any, is released in the same statement (as for a start that failed in
    // front of the caller, gateway/payment/claims.ts removeUnstartedCall): the call never ran, so
    // the payer's retry of the same X-PAYMENT buys a new call without settling again.
    const done = await conn.execute<Array<{ id: string }>>(
      releasingPayments(
        `update invocations set status = 'failed', error_class = 'internal', updated_at = now(), completed_at = now() where id = ? and status = 'pending' returning id`,
      ),
      [id],
    );
    closed += done.length;
  }
  return closed;
}

/** Runs the sweep once, `afterMs` after the process started (never keeps the process alive). */
export function scheduleOrphanSweep(orm: MikroORM, temporal: Client, log: Logger, afterMs = ORPHAN_AGE_MS): void {
  const timer = setTimeout(() => {
    closeOrphanedInvocations(orm, temporal, new Date(Date.now() - ORPHAN_AGE_MS)).then(
      (closed) => {
        if (closed) log.warn({ closed }, 'closed invocations left pending by a previous API process');
      },
      (err: Error) => log.warn({ err: err.message }, 'orphaned invocation sweep failed'),
    );
  }, afterMs);
  timer.unref();
}
