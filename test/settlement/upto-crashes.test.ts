// A metered (x402 `upto`) charge survives the processes that carry it: an API process killed
// mid-stream leaves what its meter had read on the row, and the charge is settled from it by the
// due-charges round; an API process hung mid-stream (its database session, and so its rows'
// owner lock, alive) has its row closed once the answer's end has passed, and what was measured
// is settled before the payer's authorization lapses; a gateway worker killed between the
// upstream call and the settle leaves the settle to the next worker. Each charge is settled once, and the payer's balance moves by
// exactly what was measured.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { request } from 'undici';
import { type Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { closedPort, createAgent, invocationRow, waitForRow } from '../support/proxy-helpers.ts';
import { payUptoChallenge, rpcReader, settleLostCharge, uptoPayer } from '../support/upto.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { balanceOf, newPayTo, transfersTo } from '../support/x402.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startProxyApp } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { call } from '../support/http.ts';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { failStaleStreams } from '../../gateway/invocations/stale-streams.ts';
import { startDueCharges } from '../../temporal/charges-due.ts';
import { createLogger } from '../../lib/log.ts';

const MAX = 50_000n;
const HEADER_METER = { kind: 'header', header: 'X-Usage-Cost' };

describe('upto: a metered charge through crashes', function () {
  this.timeout(180_000);
  let paying: PayingTenant;
  let upstream: TestUpstream;
  const children: ChildProcess[] = [];
  withPayingTenant('upto-crash', (p) => (paying = p));
  // Each call's upstream answer, by the request's `x-answer` header.
  const answers = new Map<string, (res: ServerResponse) => void | Promise<void>>();

  before(async () => {
    upstream = await startUpstream(async (req, res) => {
      const answer = answers.get(String(req.headers['x-answer']));
      if (answer) await answer(res);
      else res.end('{}');
    });
  });
  after(async () => {
    for (const child of children) await stopWorkerProcess(child);
    await upstream.close();
  });

  async function meteredAgent(payTo: string): Promise<string> {
    return createAgent(paying.token, {
      upstream_url: upstream.url,
      pricing: {
        scheme: 'upto',
        amount: String(MAX),
        asset: 'USDC',
        network: 'base',
        pay_to: payTo,
        meter: HEADER_METER,
      },
    });
  }

  /** The tenant's settlement configuration as it is, and a way to point it at another facilitator URL. */
  async function settlementConfig() {
    const config = await call('GET', '/v1/settlement/config', { token: paying.token });
    assert.equal(config.status, 200);
    const setConfig = (facilitatorUrl: string) =>
      call('PUT', '/v1/settlement/config', {
        token: paying.token,
        json: { facilitator_url: facilitatorUrl, facilitator_credential_ref: config.json.facilitator_credential_ref },
      });
    return { config, setConfig };
  }

  /** The payment header the unmodified upto client makes for the agent's 402 at `base`. */
  async function paymentFor(base: string, path: string, payer: Wallet): Promise<string> {
    const challenge = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${paying.token}` },
      body: '{}',
    });
    assert.equal(challenge.status, 402);
    const required = JSON.parse(Buffer.from(challenge.headers.get('payment-required')!, 'base64').toString('utf8'));
    const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
    return encodeBase64Json(wire);
  }

  it('an API process killed mid-stream: what its meter read is settled once, never more', async () => {
    const payTo = newPayTo();
    const agentId = await meteredAgent(payTo);
    const payer = await uptoPayer(paying.provider, 10_000_000n);
    const before = await balanceOf(paying.provider, payer.address);
    const key = randomUUID();
    // The upstream states the charge in its head, sends a first event, and holds the stream open.
    answers.set(key, (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-usage-cost': '4321' });
      res.write('data: {"first":true}\n\n');
    });
    const api = await startApiProcess();
    children.push(api.child);
    const path = `/v1/proxy/${agentId}/stream`;
    const res = await request(`${api.url}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${paying.token}`,
        'x-answer': key,
        'payment-signature': await paymentFor(api.url, path, payer),
      },
      body: '{}',
    });
    assert.equal(res.statusCode, 200);
    const id = String(res.headers['x-gateway-invocation-id']);
    res.body.on('error', () => undefined); // the connection breaks when the process dies
    assert.match(String((await res.body[Symbol.asyncIterator]().next()).value), /first/);
    // The charge measured so far reaches the row while the answer streams.
    await waitForRow(id, (r) => r.status === 'running' && r.paymentCharge === '4321', 10_000);

    api.child.kill('SIGKILL');
    await exited(api.child);
    // The sweep fails the rows of owners whose database sessions are gone (a killed process's, once
    // PostgreSQL has seen its connections close).
    await waitFor(
      async () => (await failStaleStreams(stack().orm)) >= 0 && (await invocationRow(id))?.status === 'failed',
      { timeoutMs: 60_000, everyMs: 200, what: `the lost stream ${id} failed by the sweep` },
    );
    const lost = await waitForRow(id);
    assert.equal(lost.errorClass, 'gateway_lost');
    assert.equal(lost.paymentCharge, '4321', 'what was measured is kept');

    await settleLostCharge(id);
    const settled = await waitForRow(id);
    assert.equal(settled.paymentSettlement, 'settled');
    assert.equal(await balanceOf(paying.provider, payer.address), before - 4321n);
    assert.equal((await transfersTo(paying.provider, payTo)).length, 1, 'settled once');
  });

  it("an API process hung mid-stream, its lock held: its row is closed past its answer's end and what was measured is settled before the authorization lapses", async () => {
    const payTo = newPayTo();
    const agentId = await meteredAgent(payTo);
    const payer = await uptoPayer(paying.provider, 10_000_000n);
    const before = await balanceOf(paying.provider, payer.address);
    const key = randomUUID();
    answers.set(key, (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-usage-cost': '2345' });
      res.write('data: {"first":true}\n\n');
    });
    // The payer signs a deadline 150 s ahead (the entry's maxTimeoutSeconds): the answer may
    // stream until 2 minutes before it (less the validity margin), about 20 s.
    const api = await startApiProcess({ X402_UPTO_TIMEOUT_SECONDS: '150', X402_UPTO_MIN_WINDOW_S: '60' });
    children.push(api.child);
    const path = `/v1/proxy/${agentId}/stream`;
    const res = await request(`${api.url}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${paying.token}`,
        'x-answer': key,
        'payment-signature': await paymentFor(api.url, path, payer),
      },
      body: '{}',
    });
    assert.equal(res.statusCode, 200);
    const id = String(res.headers['x-gateway-invocation-id']);
    res.body.on('error', () => undefined);
    assert.match(String((await res.body[Symbol.asyncIterator]().next()).value), /first/);
    const running = await waitForRow(id, (r) => r.status === 'running' && r.paymentCharge === '2345', 10_000);
    const endsBy = running.streamEndsBy!.getTime();
    assert.ok(endsBy > Date.now() && endsBy < Date.now() + 60_000, `the answer ends by ${running.streamEndsBy}`);

    // Hung: its database sessions, and the owner lock its rows name, stay alive; it cuts nothing.
    api.child.kill('SIGSTOP');
    try {
      await failStaleStreams(stack().orm);
      assert.equal((await invocationRow(id))?.status, 'running', 'its owner is not gone');
      await waitFor(
        async () =>
          (await failStaleStreams(stack().orm, 60_000, 0)) >= 0 && (await invocationRow(id))?.status === 'failed',
        { timeoutMs: 60_000, everyMs: 500, what: `the overdue stream ${id} closed by the sweep` },
      );
      assert.ok(Date.now() >= endsBy, "not closed before its answer's end");
      const lost = await waitForRow(id);
      assert.equal(lost.errorClass, 'gateway_lost');
      assert.equal(lost.paymentCharge, '2345', 'what was measured is kept');

      // Charged now, not after the wait a lost row gets for its process to turn up (an hour here).
      const round = startDueCharges({
        orm: stack().orm,
        temporal: stack().temporal,
        taskQueue: stack().config.temporal.taskQueue,
        log: createLogger('test', 'error'),
        everyMs: 3_600_000,
        streamedAfterMs: 0,
        lostAfterMs: 3_600_000,
      });
      try {
        await waitFor(
          async () =>
            (await round.runOnce()) >= 0 &&
            ['settled', 'failed'].includes(String((await waitForRow(id)).paymentSettlement)),
          { timeoutMs: 60_000, everyMs: 500, what: `the charge of ${id} settled` },
        );
      } finally {
        await round.stop();
      }
      const settled = await waitForRow(id);
      assert.equal(settled.paymentSettlement, 'settled', String(settled.paymentSettleError));
      assert.equal(await balanceOf(paying.provider, payer.address), before - 2345n);
      assert.deepEqual(
        (await transfersTo(paying.provider, payTo)).map((t) => t.value),
        [2345n],
        'settled once',
      );
    } finally {
      api.child.kill('SIGKILL');
      await exited(api.child);
    }
  });

  it('a worker killed between the upstream call and the settle: the next worker settles the charge once', async () => {
    const payTo = newPayTo();
    const agentId = await meteredAgent(payTo);
    const payer = await uptoPayer(paying.provider, 10_000_000n);
    const before = await balanceOf(paying.provider, payer.address);
    const taskQueue = `upto-crash-${randomUUID()}`;
    const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
    const { config, setConfig } = await settlementConfig();
    try {
      const first = await startWorkerProcess(taskQueue);
      children.push(first);
      const key = randomUUID();
      // Before answering, the tenant's facilitator is made unreachable (a closed port): the
      // settle after the call cannot get an answer, and is retried.
      const unreachable = `https://127.0.0.1:${await closedPort()}/`;
      answers.set(key, async (res) => {
        const put = await setConfig(unreachable);
        assert.ok(put.status === 200 || put.status === 201, `settlement config: ${put.status} ${put.text}`);
        res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': '2468' });
        res.end('{}');
      });
      const path = `/v1/proxy/${agentId}`;
      const res = await request(`${gateway.url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${paying.token}`,
          'x-answer': key,
          'payment-signature': await paymentFor(gateway.url, path, payer),
        },
        body: '{}',
      });
      assert.equal(res.statusCode, 202);
      const { invocation_id: id } = (await res.body.json()) as { invocation_id: string };
      // The call is complete and charged; its settle is being retried.
      const done = await waitForRow(id, (r) => r.status === 'succeeded', 30_000);
      assert.equal(done.paymentCharge, '2468');
      assert.ok(done.paymentSettlement === null || done.paymentSettlement === 'settling', 'not settled yet');

      first.kill('SIGKILL');
      await exited(first);
      const put = await setConfig(config.json.facilitator_url);
      assert.equal(put.status, 200);
      children.push(await startWorkerProcess(taskQueue));

      const settled = await waitForRow(
        id,
        (r) => r.paymentSettlement !== null && r.paymentSettlement !== 'settling',
        90_000,
      );
      assert.equal(settled.paymentSettlement, 'settled');
      assert.match(String(settled.paymentTransaction), /^0x[0-9a-f]{64}$/);
      assert.equal(await balanceOf(paying.provider, payer.address), before - 2468n);
      assert.deepEqual(
        (await transfersTo(paying.provider, payTo)).map((t) => t.value),
        [2468n],
        'settled once',
      );
    } finally {
      await gateway.close();
    }
  });
  it('an attempt retried after its worker completed the call still settles the charge, once', async () => {
    // The worker that completed the row may die before its attempt is reported: the retried
    // attempt finds the row complete, and its answer must still say the charge is due. Forced
    // here without a race: the first workflow is terminated while its settle cannot be answered,
    // and the call's workflow is run again over the completed row.
    const payTo = newPayTo();
    const agentId = await meteredAgent(payTo);
    const payer = await uptoPayer(paying.provider, 10_000_000n);
    const before = await balanceOf(paying.provider, payer.address);
    const { config, setConfig } = await settlementConfig();
    const unreachable = `https://127.0.0.1:${await closedPort()}/`;
    const key = randomUUID();
    answers.set(key, async (res) => {
      const put = await setConfig(unreachable);
      assert.equal(put.status, 200, `settlement config: ${put.status} ${put.text}`);
      res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': '1357' });
      res.end('{}');
    });
    const path = `/v1/proxy/${agentId}`;
    const res = await request(`${stack().apiUrl}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${paying.token}`,
        'x-answer': key,
        'payment-signature': await paymentFor(stack().apiUrl, path, payer),
      },
      body: '{}',
    });
    assert.equal(res.statusCode, 202);
    const { invocation_id: id } = (await res.body.json()) as { invocation_id: string };
    await waitForRow(id, (r) => r.status === 'succeeded' && r.paymentCharge === '1357', 30_000);
    await stack().temporal.workflow.getHandle(id).terminate('the worker that completed the call is gone');
    assert.notEqual((await waitForRow(id)).paymentSettlement, 'settled', 'not settled by the first run');
    const put = await setConfig(config.json.facilitator_url);
    assert.equal(put.status, 200);

    const again = await stack().temporal.workflow.start('InvocationWorkflow', {
      taskQueue: stack().config.temporal.taskQueue,
      workflowId: `${id}-retried`,
      args: [{ invocationId: id, tenantId: paying.tenant, agentId, emitReceipts: false, outcomeStatusOnly: true }],
    });
    const outcome = (await again.result()) as { chargeDue?: boolean; status: string };
    assert.equal(outcome.status, 'succeeded');
    assert.equal(outcome.chargeDue, true, 'the retried attempt says the charge is due');
    const settled = await waitForRow(id, (r) => r.paymentSettlement !== null && r.paymentSettlement !== 'settling');
    assert.equal(settled.paymentSettlement, 'settled');
    assert.equal(await balanceOf(paying.provider, payer.address), before - 1357n);
    assert.deepEqual(
      (await transfersTo(paying.provider, payTo)).map((t) => t.value),
      [1357n],
      'settled once',
    );
  });
});
