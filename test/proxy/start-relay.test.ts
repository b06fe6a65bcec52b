// The start relay (temporal/start-relay.ts): an accepted transactional call whose workflow the
// accepting process did not start (it died between the commit and the start, or Temporal was
// away) is started by a relay and runs once. Real parts: the stack's Temporal and worker; the
// crash is a real SIGKILL of an API child process whose Temporal connection was cut.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { callAt, waitForInvocation } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startTcpRelay } from '../support/tcp-relay.ts';
import { startApiProcess } from '../support/api-process.ts';
import { newId } from '../../lib/ids.ts';
import { createLogger } from '../../lib/log.ts';
import { startRelay } from '../../temporal/start-relay.ts';

const sql = <T>(query: string, params: unknown[] = []) => stack().orm.em.getConnection().execute<T[]>(query, params);

function relay(afterMs = 0) {
  return startRelay({
    orm: stack().orm,
    temporal: stack().temporal,
    taskQueue: stack().config.temporal.taskQueue,
    startDeadlineMs: stack().config.workflowStartDeadlineMs,
    log: createLogger('relay', 'silent'),
    everyMs: 0,
    afterMs,
  });
}

describe('start relay', function () {
  this.timeout(120_000);
  let upstream: TestUpstream;
  let token: string;
  let tenant: string;
  before(async () => {
    upstream = await startUpstream();
    tenant = `tenant-relay-${randomUUID()}`;
    token = await stack().token(tenant);
  });
  after(() => upstream.close());

  const seen = (marker: string) => upstream.received.filter((r) => r.body.toString() === marker).length;

  it('starts the call an API process accepted and was SIGKILLed before starting: it runs once', async () => {
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    const temporalLink = await startTcpRelay(stack().infra.temporalAddress);
    const api = await startApiProcess({ TEMPORAL_ADDRESS: temporalLink.address });
    const marker = `crash-before-start ${randomUUID()}`;
    try {
      // Temporal unreachable from that process: the call is accepted, its start cannot happen.
      temporalLink.down = true;
      temporalLink.cut();
      const accepted = await callAt(api.url, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain' },
      });
      assert.equal(accepted.status, 202, accepted.text);
      api.child.kill('SIGKILL');
      const invocationId = accepted.json.invocation_id as string;
      const [row] = await sql<{ status: string }>('select status from invocations where id = ?', [invocationId]);
      assert.equal(row.status, 'pending', 'committed before the 202, never started');
      assert.equal(seen(marker), 0);

      const r = relay();
      // (Other tests' old unstarted intents, if any, are started too.)
      assert.ok((await r.runOnce()) >= 1);
      await r.stop();
      assert.equal((await waitForInvocation(token, agentId, invocationId)).status, 'succeeded');
      assert.equal(seen(marker), 1, 'sent once');
      const [marked] = await sql<{ workflow_started_at: Date | null }>(
        'select workflow_started_at from invocations where id = ?',
        [invocationId],
      );
      assert.ok(marked.workflow_started_at, 'marked started, so no relay starts it again');
    } finally {
      api.child.kill('SIGKILL');
      await temporalLink.close();
    }
  });

  it('leaves young intents to their own process, attaches to a running workflow, and fails a row whose workflow closed without running it (its payment released)', async () => {
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    const insert = async (createdAt: Date) => {
      const id = newId('inv');
      await sql(
        `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, created_at, updated_at) values (?, ?, ?, 'transactional', 'pending', ?, 'u', ?, ?)`,
        [id, tenant, agentId, randomUUID(), createdAt, createdAt],
      );
      return id;
    };
    const old = new Date(Date.now() - 60_000);
    const young = await insert(new Date());
    const waiting = await insert(old);
    const closed = await insert(old);
    await sql(
      `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, transaction, invocation_id)
       values (?, ?, ?, 'base', '0xasset', '0xpayer', ?, '1000', 'settled', '0xtx', ?)`,
      [randomUUID(), tenant, agentId, `0x${randomUUID().replaceAll('-', '')}`, closed],
    );
    // A workflow on a task queue nobody polls: it exists, so its call is waiting, not lost.
    const nobody = `nobody-${randomUUID()}`;
    const running = await stack().temporal.workflow.start('InvocationWorkflow', {
      taskQueue: nobody,
      workflowId: waiting,
      args: [{ invocationId: waiting, tenantId: tenant, agentId }],
    });
    const ended = await stack().temporal.workflow.start('InvocationWorkflow', {
      taskQueue: nobody,
      workflowId: closed,
      args: [{ invocationId: closed, tenantId: tenant, agentId }],
    });
    await ended.terminate('operator ended it');
    try {
      const r = relay(10_000);
      await r.runOnce();
      await r.stop();
      const rows = new Map(
        (
          await sql<{ id: string; status: string; error_class: string | null; workflow_started_at: Date | null }>(
            'select id, status, error_class, workflow_started_at from invocations where id in (?, ?, ?)',
            [young, waiting, closed],
          )
        ).map((row) => [row.id, row]),
      );
      assert.equal(rows.get(young)!.workflow_started_at, null, 'a young intent is its own process to start');
      assert.equal(rows.get(waiting)!.status, 'pending');
      assert.ok(rows.get(waiting)!.workflow_started_at, 'attached to its running workflow, not started twice');
      assert.equal((await running.describe()).runId, running.firstExecutionRunId, 'the same run');
      assert.equal(rows.get(closed)!.status, 'failed');
      assert.equal(rows.get(closed)!.error_class, 'workflow_terminated');
      const [claim] = await sql<{ invocation_id: string | null }>(
        'select invocation_id from payment_claims where tenant_id = ?',
        [tenant],
      );
      assert.equal(claim.invocation_id, null, 'the payment of a call that never ran is released');
    } finally {
      await running.terminate('test done').catch(() => undefined);
      await sql('delete from payment_claims where tenant_id = ?', [tenant]);
      await sql('delete from invocations where id in (?, ?, ?)', [young, waiting, closed]);
    }
  });

  it('two relays at once start each intent once', async () => {
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    const old = new Date(Date.now() - 60_000);
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) {
      const id = newId('inv');
      ids.push(id);
      await sql(
        `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, created_at, updated_at)
         values (?, ?, ?, 'transactional', 'pending', ?, 'u', ?, ?)`,
        [id, tenant, agentId, randomUUID(), old, old],
      );
    }
    const [a, b] = [relay(), relay()];
    const [startedA, startedB] = await Promise.all([a.runOnce(), b.runOnce()]);
    await Promise.all([a.stop(), b.stop()]);
    // Each row is leased by one relay (other tests' old intents may be among theirs).
    assert.ok(startedA + startedB >= 30, `${startedA} + ${startedB}`);
    const marked = await sql<{ n: number }>(
      `select count(*)::int as n from invocations where agent_id = ? and workflow_started_at is not null`,
      [agentId],
    );
    assert.equal(marked[0].n, 30);
    for (const id of ids) assert.notEqual((await waitForInvocation(token, agentId, id)).status, 'pending');
  });
});
