// Whose an A2A task is (docs/API.md "A2A agents", "Tasks stay with their caller"), on the real
// stack: a public A2A agent (an @a2a-js/sdk server upstream) paid by unmodified @x402/fetch
// clients. A task is bound to the payer whose call created it: another payer, the tenant's own
// /v1 token, or an unpaid caller naming it gets what an unknown task gets (404 before policy,
// payment and the upstream; an unpaid request is the same challenge either way), and a task
// created through /v1 is the tenant's, out of every payer's reach. Bindings expire after
// A2A_TASK_RETENTION_DAYS (the retention schedule's workflow, workflows/retention.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { retentionRun } from '../support/workflows.ts';
import { call, uniqueName } from '../support/http.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { payingFetch } from '../support/paying-client.ts';
import {
  balanceOf,
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  type TestAccount,
} from '../support/x402.ts';

const rpc = (method: string, params: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 1, method, params });
const sendMessage = rpc('SendMessage', {
  message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'echo public task' }] },
});
const getTask = (id: string) => rpc('GetTask', { id });

describe('A2A tasks stay with the caller that created them', function () {
  this.timeout(180_000);
  let upstream: A2aUpstream;
  let provider: ReturnType<typeof chainProvider>;
  let account: TestAccount;

  before(async () => {
    upstream = await startA2aServer();
    provider = chainProvider();
    account = await newAccount(`a2a-public-tasks-${randomUUID()}`);
  });
  after(async () => {
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  it("refuses a payer another payer's task, and the tenant's /v1 side a payer's, like an unknown task", async () => {
    const token = await settlingTenant(`tenant-a2a-public-tasks-${randomUUID()}`, account);
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('a2a-public-tasks'),
        protocol: 'a2a',
        upstream_url: upstream.url,
        pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
        public: true,
        public_description: 'Echoes text over A2A',
      },
    });
    assert.equal(created.status, 201, created.text);
    const url: string = created.json.public_stream_url;
    const agentId: string = created.json.id;

    const paying = (payer: Wallet, to = url, auth: Record<string, string> = {}) => {
      const { pay } = payingFetch('v2-only', payer);
      return async (body: unknown) => {
        const res = await pay(to, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'a2a-version': '1.0', ...auth },
          body: JSON.stringify(body),
        });
        return { status: res.status, json: (await res.json()) as Record<string, unknown> };
      };
    };
    const alice = await newPayer(1_000_000n);
    const bob = await newPayer(1_000_000n);
    const asAlice = paying(alice);
    const asBob = paying(bob);

    const sent = await asAlice(sendMessage);
    assert.equal(sent.status, 200, JSON.stringify(sent.json));
    const aliceTask = (sent.json.result as { task: { id: string } }).task.id;
    assert.equal((await asAlice(getTask(aliceTask))).status, 200, 'the payer reads its own task');

    const unknown = `task-${randomUUID()}`;
    const bobBalance = await balanceOf(provider, bob.address);
    const seen = upstream.bodies.length;
    for (const id of [aliceTask, unknown]) {
      const res = await asBob(getTask(id));
      assert.equal(res.status, 404, `${id}: ${JSON.stringify(res.json)}`);
      assert.deepEqual(res.json, { error: 'task not found through this agent' });
      // Unpaid: the same challenge whether the task exists or not.
      const unpaid = await call('POST', url.replace(stack().apiUrl, ''), {
        json: getTask(id),
        headers: { 'a2a-version': '1.0' },
      });
      assert.equal(unpaid.status, 402, unpaid.text);
      // The tenant's own /v1 side does not reach a payer's task either.
      const tenantRead = await call('POST', `/v1/proxy/${agentId}/stream`, {
        token,
        json: getTask(id),
        headers: { 'a2a-version': '1.0' },
      });
      assert.equal(tenantRead.status, 404, tenantRead.text);
      assert.deepEqual(tenantRead.json, { error: 'task not found through this agent' });
    }
    assert.equal(upstream.bodies.length, seen, 'nothing reached the upstream');
    assert.equal(await balanceOf(provider, bob.address), bobBalance, 'a refused payer is not charged');

    // A task a payer creates on the transactional URL is bound by the worker, to that payer too.
    const later = await paying(alice, created.json.public_url)(sendMessage);
    assert.equal(later.status, 202, JSON.stringify(later.json));
    const laterRow = await waitForRow(later.json.invocation_id as string);
    assert.equal(laterRow.status, 'succeeded');
    assert.ok(laterRow.a2aTaskId);
    assert.equal((await asAlice(getTask(laterRow.a2aTaskId))).status, 200);
    assert.equal((await asBob(getTask(laterRow.a2aTaskId))).status, 404);

    // A task created through /v1 is the tenant's: its token reads it, no payer does.
    const asTenant = paying(alice, `${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
      authorization: `Bearer ${token}`,
    });
    const tenantSent = await asTenant(sendMessage);
    assert.equal(tenantSent.status, 200, JSON.stringify(tenantSent.json));
    const tenantTask = (tenantSent.json.result as { task: { id: string } }).task.id;
    assert.equal((await asTenant(getTask(tenantTask))).status, 200, 'the tenant reads its own task');
    const payerRead = await asAlice(getTask(tenantTask));
    assert.equal(payerRead.status, 404, JSON.stringify(payerRead.json));
    const [row] = await stack()
      .orm.em.getConnection()
      .execute<Array<{ caller: string }>>('select caller from a2a_tasks where agent_id = ? and task_id = ?', [
        agentId,
        aliceTask,
      ]);
    assert.equal(row.caller, `x402:${alice.address}`);
  });
});

describe('A2A task bindings expire with A2A_TASK_RETENTION_DAYS', function () {
  this.timeout(60_000);

  it('purges bindings first seen before the cutoff, in bounded batches: the task is then unknown', async () => {
    const upstream = await startA2aServer();
    try {
      const token = await stack().token(`tenant-a2a-task-retention-${randomUUID()}`);
      const agentId = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
      // Two tasks created on the transactional endpoint: bound by the worker, never yet
      // remembered by this API process.
      const tasks: string[] = [];
      for (let i = 0; i < 2; i++) {
        const accepted = await call('POST', `/v1/proxy/${agentId}`, {
          token,
          json: sendMessage,
          headers: { 'a2a-version': '1.0' },
        });
        assert.equal(accepted.status, 202, accepted.text);
        const row = await waitForRow(accepted.json.invocation_id);
        assert.ok(row.a2aTaskId, 'the invocation records the task its answer created');
        tasks.push(row.a2aTaskId);
      }
      const [old, recent] = tasks;
      const conn = stack().orm.em.fork().getConnection();
      await conn.execute(`update a2a_tasks set created_at = now() - interval '40 days' where task_id = ?`, [old]);

      await retentionRun('a2a-task-retention', {
        retentionDays: 365_000,
        a2aTaskRetentionDays: 30,
        batchSize: 1,
        maxBatchesPerRun: 5,
      });
      const left = await conn.execute<Array<{ task_id: string }>>(
        'select task_id from a2a_tasks where agent_id = ? order by task_id',
        [agentId],
      );
      assert.deepEqual(
        left.map((r) => r.task_id),
        [recent],
      );

      const read = (id: string) =>
        call('POST', `/v1/proxy/${agentId}/stream`, { token, json: getTask(id), headers: { 'a2a-version': '1.0' } });
      const expired = await read(old);
      assert.equal(expired.status, 404, expired.text);
      assert.deepEqual(expired.json, { error: 'task not found through this agent' });
      assert.equal((await read(recent)).status, 200);
    } finally {
      await upstream.close();
    }
  });
});
