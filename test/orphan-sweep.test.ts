// Rows an API process left `pending` when it died between the commit and the workflow start
// (found by `npm run chaos -- worker-kill`): the sweep fails those with no running workflow, and leaves
// alone a row whose workflow exists (waiting for a worker) and a row young enough that its
// start may still be under way. A paid orphan's payment is released, not lost with the row.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from './support/stack.ts';
import { newId } from '../lib/ids.ts';
import { closeOrphanedInvocations } from '../api/proxy/orphans.ts';

async function pendingRow(tenantId: string, createdAt: Date): Promise<string> {
  const id = newId('inv');
  await stack()
    .orm.em.getConnection()
    .execute(
      `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, created_at, updated_at) values (?, ?, ?, 'transactional', 'pending', ?, 'u', ?, ?)`,
      [id, tenantId, newId('agt'), randomUUID(), createdAt, createdAt],
    );
  return id;
}

/** A settled payment claim bound to the invocation, as the payment stage leaves it. */
async function bindPayment(tenantId: string, invocationId: string): Promise<void> {
  await stack()
    .orm.em.getConnection()
    .execute(
      `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, transaction, invocation_id)
       values (?, ?, 'agt_x', 'base', '0xasset', '0xpayer', ?, '1000', 'settled', '0xtx', ?)`,
      [randomUUID(), tenantId, `0x${randomUUID().replaceAll('-', '')}`, invocationId],
    );
}

async function boundTo(invocationId: string): Promise<string | null> {
  const rows = await stack()
    .orm.em.getConnection()
    .execute(`select invocation_id from payment_claims where tenant_id like 'tenant-orphans-%' and invocation_id = ?`, [
      invocationId,
    ]);
  return rows.length ? String((rows[0] as { invocation_id: string }).invocation_id) : null;
}

async function row(id: string): Promise<{ status: string; error_class: string | null; completed_at: Date | null }> {
  const [r] = await stack()
    .orm.em.getConnection()
    .execute(`select status, error_class, completed_at from invocations where id = ?`, [id]);
  return r as { status: string; error_class: string | null; completed_at: Date | null };
}

describe('orphaned pending invocations', function () {
  this.timeout(60_000);

  it('are failed when Temporal has no running workflow for them; rows with a running workflow and young rows are left alone', async () => {
    const tenant = `tenant-orphans-${randomUUID()}`;
    const old = new Date(Date.now() - 10 * 60_000);
    const orphan = await pendingRow(tenant, old);
    const waiting = await pendingRow(tenant, old);
    const young = await pendingRow(tenant, new Date());
    const paidOrphan = await pendingRow(tenant, old);
    // Its workflow was terminated without moving it (a start that failed in front of the caller
    // whose row could not be removed): nothing will complete it either.
    const abandoned = await pendingRow(tenant, old);
    await bindPayment(tenant, paidOrphan);
    await bindPayment(tenant, waiting);
    const ended = await stack().temporal.workflow.start('InvocationWorkflow', {
      taskQueue: `nobody-${randomUUID()}`,
      workflowId: abandoned,
      args: [{ invocationId: abandoned, tenantId: tenant, agentId: 'agt_x' }],
    });
    await ended.terminate('invocation not accepted');
    // A workflow on a task queue nobody polls: it exists, so its row must wait for it.
    const handle = await stack().temporal.workflow.start('InvocationWorkflow', {
      taskQueue: `nobody-${randomUUID()}`,
      workflowId: waiting,
      args: [{ invocationId: waiting, tenantId: tenant, agentId: 'agt_x' }],
    });
    try {
      const closed = await closeOrphanedInvocations(stack().orm, stack().temporal, new Date(Date.now() - 9 * 60_000));
      assert.ok(closed >= 1, `closed ${closed}`);
      const o = await row(orphan);
      assert.equal(o.status, 'failed');
      assert.equal(o.error_class, 'internal');
      assert.ok(o.completed_at);
      assert.equal((await row(waiting)).status, 'pending');
      assert.equal((await row(young)).status, 'pending');
      assert.equal((await row(abandoned)).status, 'failed', 'a row whose workflow closed without moving it');
      assert.equal(await boundTo(paidOrphan), null, 'the paid orphan released its payment');
      assert.equal((await row(paidOrphan)).status, 'failed');
      assert.equal(await boundTo(waiting), waiting, 'a call that will still run keeps its payment');
      // A second sweep finds nothing more of ours to close.
      await closeOrphanedInvocations(stack().orm, stack().temporal, new Date(Date.now() - 9 * 60_000));
      assert.equal((await row(waiting)).status, 'pending');
    } finally {
      await handle.terminate('test done').catch(() => undefined);
      await stack().orm.em.getConnection().execute(`delete from payment_claims where tenant_id = ?`, [tenant]);
      await stack().orm.em.getConnection().execute(`delete from invocations where tenant_id = ?`, [tenant]);
    }
  });
});
