// A paid call the gateway lost before it reached its upstream must not keep its payment: its row
// is closed and the same payment header buys the call it paid for, once, charged once.
// - Streaming: a real API process binds the payment to its row and is SIGKILLed before the row
//   has its owner (its row connection is held at the TCP level, so its forwarding mark can
//   never be written; every other connection works). The lost-stream sweep fails the owner-less
//   row `gateway_lost` and releases the payment; the same X-PAYMENT then streams once. The same
//   process left alive gives up on its mark after its deadline, forwards nothing, releases the
//   payment itself and answers 503 "retry with the same payment header".
// - Transactional: a call accepted by a gateway whose task queue no worker polls, started (and
//   marked started by a start relay), then terminated through the Temporal client before any
//   worker ran it. The closed-workflow check fails the row `workflow_terminated`, deletes its
//   request body and releases the payment; the same X-PAYMENT then runs once.
// - Transactional, failed by its activity before any attempt (the agent lost its upstream_url
//   after the call was accepted): recorded `protocol`, and its payment released the same way.
// - Transactional, terminated while its request is at the upstream: the call may have been
//   served, so its payment stays with it (402 payment already used), whether its live activity
//   closes the row (it learns from its heartbeat that its workflow is gone) or the check does
//   (its worker was SIGKILLed).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import type { JsonRpcProvider } from 'ethers';
import { stack } from '../support/stack.ts';
import { call, callAt, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { withPayingTenant } from '../support/settling.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited, startWorkerProcess } from '../support/worker-process.ts';
import { startTcpRelay } from '../support/tcp-relay.ts';
import { until } from '../support/facilitator.ts';
import { balanceOf, encodePayment, newPayTo, newPayer, signPayment, transfersTo } from '../support/x402.ts';
import { failStaleStreams } from '../../gateway/invocations/stale-streams.ts';
import { startGateway } from '../../api/wiring.ts';
import { startRelay } from '../../temporal/start-relay.ts';
import { checkUnfinishedCalls } from '../../temporal/unfinished-calls.ts';
import { createLogger } from '../../lib/log.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

const PRICE = 3_000n;
const log = createLogger('api', 'silent');
const FUNDS = 100_000n;

describe('a paid call lost to a crash or a terminated workflow: its row closed, its payment resumable once exactly when the call never reached its upstream', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let upstream: TestUpstream;
  /** Receives calls and answers none (closed at the end). */
  let slow: TestUpstream;
  let token: string;
  withPayingTenant('unfinished', (paying) => ({ provider, upstream, token } = paying));
  before(async () => {
    slow = await startUpstream(() => undefined);
  });
  after(() => slow.close());

  const sql = <T>(query: string, params: unknown[]) => stack().orm.em.getConnection().execute<T[]>(query, params);

  async function pricedAgent(payTo: string, upstreamUrl = upstream.url): Promise<string> {
    const agent = await call('POST', '/v1/agents', {
      token,
      json: {
        name: `unfinished-${randomUUID()}`,
        upstream_url: upstreamUrl,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(agent.status, 201, agent.text);
    return agent.json.id as string;
  }

  const claimOf = async (agentId: string) =>
    (
      await sql<{ invocation_id: string | null; transaction: string | null; status: string }>(
        'select invocation_id, transaction, status from payment_claims where agent_id = ?',
        [agentId],
      )
    )[0];

  const receiptOf = (header: unknown) =>
    JSON.parse(Buffer.from(String(header), 'base64').toString('utf8')) as { transaction: string };

  /** A gateway API (no start relay, no check) that starts its workflows on `taskQueue`. */
  async function gatewayOn(taskQueue: string) {
    const config: GatewayConfig = { ...stack().config, port: 0, temporal: { ...stack().config.temporal, taskQueue } };
    const server: Server = await startGateway(config, stack().orm, stack().temporal, log);
    return {
      config,
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      async close() {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      },
    };
  }

  const received = (mark: string, at = upstream) => at.received.filter((r) => r.body.toString() === mark).length;

  const rowOf = async (id: string) =>
    (
      await sql<{ status: string; error_class: string | null; request_body_id: string | null }>(
        'select status, error_class, request_body_id from invocations where id = ?',
        [id],
      )
    )[0];

  const bodyKept = async (bodyId: string) => (await sql('select 1 from bodies where id = ?', [bodyId])).length > 0;

  /** A paid call at the slow upstream, through the API at `base`: its row (running) and the payment's facts. */
  async function callAtTheUpstream(base: string) {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo, slow.url);
    const payer = await newPayer(FUNDS);
    const header = encodePayment(await signPayment(payer, { payTo, value: PRICE }));
    const mark = `slow-${randomUUID()}`;
    const accepted = await callAt(base, 'POST', `/v1/proxy/${agentId}`, {
      token,
      body: mark,
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    });
    assert.equal(accepted.status, 202, accepted.text);
    const id = accepted.json.invocation_id as string;
    await until('the call at the upstream', async () => (received(mark, slow) ? true : null));
    const [{ request_body_id: bodyId }] = await sql<{ request_body_id: string }>(
      'select request_body_id from invocations where id = ?',
      [id],
    );
    const transaction = receiptOf(accepted.headers['x-payment-response']).transaction;
    return { id, agentId, payTo, payer, header, mark, bodyId, transaction };
  }

  /** The call may have been served: its payment stays with it, charged once. */
  async function assertPaymentKept(c: Awaited<ReturnType<typeof callAtTheUpstream>>): Promise<void> {
    assert.equal((await claimOf(c.agentId)).invocation_id, c.id, 'the payment stays with the call');
    const again = await call('POST', `/v1/proxy/${c.agentId}`, {
      token,
      body: c.mark,
      headers: { 'content-type': 'text/plain', 'x-payment': c.header },
    });
    assert.equal(again.status, 402, again.text);
    assert.equal(again.json.error, 'payment already used');
    assert.equal(received(c.mark, slow), 1, 'sent once');
    await assertChargedOnce(c.payTo, c.payer.address, c.transaction);
  }

  /**
   * A paid stream sent to an API process whose row connections are held at the TCP level (every
   * other connection works): it settles and binds, and its forwarding mark cannot be written.
   */
  async function paidStreamWithHeldRows(env: Record<string, string> = {}) {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo);
    const payer = await newPayer(FUNDS);
    const header = encodePayment(await signPayment(payer, { payTo, value: PRICE }));
    const mark = `stream-${randomUUID()}`;
    const database = new URL(stack().config.databaseUrl);
    const pgRelay = await startTcpRelay(`${database.hostname}:${database.port}`);
    // Only the API's row connections (application_name gateway-stream-rows) are held.
    pgRelay.holdMatching = 'gateway-stream-rows';
    database.host = pgRelay.address;
    const api = await startApiProcess({ DATABASE_URL: database.toString(), ...env });
    const answer = request(`${api.url}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'x-payment': header, 'content-type': 'text/plain' },
      body: mark,
    }).catch(() => null);
    const bound = await until('the payment bound to the call', async () => {
      const claim = await claimOf(agentId);
      return claim?.invocation_id ? claim : null;
    });
    assert.equal(bound.status, 'settled');
    const [row] = await sql<{ status: string; owner: string | null; attempts: number }>(
      'select status, owner, attempts from invocations where id = ?',
      [bound.invocation_id],
    );
    assert.deepEqual(row, { status: 'running', owner: null, attempts: 0 }, 'bound, without an owner');
    return {
      agentId,
      payTo,
      payer,
      header,
      mark,
      api,
      answer,
      id: bound.invocation_id!,
      transaction: bound.transaction!,
      async close() {
        api.child.kill('SIGKILL');
        await pgRelay.close();
      },
    };
  }

  /** The stream's row is closed with `errorClass`, its payment released; the same header then streams once. */
  async function assertStreamResumesOnce(c: Awaited<ReturnType<typeof paidStreamWithHeldRows>>, errorClass: string) {
    const [closed] = await sql<{ status: string; error_class: string; completed_at: Date | null }>(
      'select status, error_class, completed_at from invocations where id = ?',
      [c.id],
    );
    assert.equal(closed.status, 'failed');
    assert.equal(closed.error_class, errorClass);
    assert.ok(closed.completed_at);
    assert.equal((await claimOf(c.agentId)).invocation_id, null, 'the payment is released');
    assert.equal(received(c.mark), 0, 'the upstream was never contacted');

    const resumed = await request(`${stack().apiUrl}/v1/proxy/${c.agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'x-payment': c.header, 'content-type': 'text/plain' },
      body: c.mark,
    });
    assert.equal(resumed.statusCode, 200);
    assert.match(await resumed.body.text(), new RegExp(c.mark));
    assert.equal(receiptOf(resumed.headers['x-payment-response']).transaction, c.transaction);
    assert.equal(received(c.mark), 1, 'served once');
    await assertChargedOnce(c.payTo, c.payer.address, c.transaction);
    const again = await request(`${stack().apiUrl}/v1/proxy/${c.agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'x-payment': c.header },
      body: c.mark,
    });
    assert.equal(again.statusCode, 402, 'it bought one call');
    await again.body.dump();
  }

  it('streaming: an API process killed between the binding and the forwarding mark', async () => {
    const c = await paidStreamWithHeldRows();
    try {
      c.api.child.kill('SIGKILL');
      await exited(c.api.child);
      assert.equal(await c.answer, null, 'the caller got no answer');
      assert.equal(received(c.mark), 0, 'the upstream was never contacted');
      assert.ok((await failStaleStreams(stack().orm, 0)) >= 1);
      await assertStreamResumesOnce(c, 'gateway_lost');
    } finally {
      await c.close();
    }
  });

  it('streaming: a live API process whose forwarding mark is not written gives the payment back and says resend', async () => {
    // A mark deadline shorter than the default 10 s: the test need not sit it out.
    const c = await paidStreamWithHeldRows({ STREAM_MARK_DEADLINE_MS: '3000' });
    try {
      // The mark's deadline passes: the process forwards nothing and releases the payment.
      const answer = await c.answer;
      assert.ok(answer);
      assert.equal(answer.statusCode, 503);
      assert.equal(answer.headers['retry-after'], '3');
      assert.deepEqual(await answer.body.json(), {
        error: 'payment is still settling; retry with the same payment header',
      });
      await assertStreamResumesOnce(c, 'internal');
    } finally {
      await c.close();
    }
  });

  it('transactional: a workflow terminated before any worker ran it', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo);
    const payer = await newPayer(FUNDS);
    const header = encodePayment(await signPayment(payer, { payTo, value: PRICE }));
    const mark = `tx-${randomUUID()}`;

    const taskQueue = `unpolled-${randomUUID()}`;
    const gateway = await gatewayOn(taskQueue);
    try {
      const accepted = await callAt(gateway.url, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: mark,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(accepted.status, 202, accepted.text);
      const id = accepted.json.invocation_id as string;
      const transaction = receiptOf(accepted.headers['x-payment-response']).transaction;
      const handle = stack().temporal.workflow.getHandle(id);
      await until('the workflow started', () =>
        handle.describe().then(
          () => true,
          () => null,
        ),
      );
      // A relay attaches to the running workflow and marks the intent started: the relay is done with it.
      const relay = startRelay({
        orm: stack().orm,
        temporal: stack().temporal,
        taskQueue,
        startDeadlineMs: stack().config.workflowStartDeadlineMs,
        log,
        everyMs: 0,
        afterMs: 0,
      });
      await relay.runOnce();
      await relay.stop();
      const [started] = await sql<{ status: string; workflow_started_at: Date | null; request_body_id: string }>(
        'select status, workflow_started_at, request_body_id from invocations where id = ?',
        [id],
      );
      assert.equal(started.status, 'pending');
      assert.ok(started.workflow_started_at);
      await handle.terminate('an operator ended it');

      const check = checkUnfinishedCalls({ orm: stack().orm, temporal: stack().temporal, log, everyMs: 0, afterMs: 0 });
      await check.runOnce();
      await check.stop();
      const [closed] = await sql<{ status: string; error_class: string; request_body_id: string | null }>(
        'select status, error_class, request_body_id from invocations where id = ?',
        [id],
      );
      assert.equal(closed.status, 'failed');
      assert.equal(closed.error_class, 'workflow_terminated');
      assert.equal(closed.request_body_id, null);
      assert.equal(
        (await sql('select 1 from bodies where id = ?', [started.request_body_id])).length,
        0,
        'the request body is deleted',
      );
      assert.equal((await claimOf(agentId)).invocation_id, null, 'the payment is released');
      assert.equal(received(mark), 0, 'never ran');

      const resumed = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: mark,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(resumed.status, 202, resumed.text);
      assert.equal(receiptOf(resumed.headers['x-payment-response']).transaction, transaction);
      const done = await waitForInvocation(token, agentId, resumed.json.invocation_id as string);
      assert.equal(done.status, 'succeeded');
      assert.equal(received(mark), 1, 'ran once');
      await assertChargedOnce(payTo, payer.address, transaction);
      const again = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: mark,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(again.status, 402, 'it bought one call');
    } finally {
      await gateway.close();
    }
  });

  it('transactional: failed by its activity before any attempt (no upstream_url any more): the payment is released', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo);
    const payer = await newPayer(FUNDS);
    const header = encodePayment(await signPayment(payer, { payTo, value: PRICE }));
    const mark = `protocol-${randomUUID()}`;
    const gateway = await gatewayOn(`later-${randomUUID()}`);
    try {
      const accepted = await callAt(gateway.url, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: mark,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(accepted.status, 202, accepted.text);
      const transaction = receiptOf(accepted.headers['x-payment-response']).transaction;
      const cleared = await call('PATCH', `/v1/agents/${agentId}`, { token, json: { upstream_url: null } });
      assert.equal(cleared.status, 200, cleared.text);

      const { worker, connection } = await createGatewayWorker(gateway.config, stack().orm, {
        workflowBundle: stack().workflowBundle,
      });
      const running = worker.run();
      let failed;
      try {
        failed = await waitForInvocation(token, agentId, accepted.json.invocation_id as string);
      } finally {
        worker.shutdown();
        await running;
        await connection.close();
      }
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error_class, 'protocol');
      assert.equal((await claimOf(agentId)).invocation_id, null, 'the payment is released');

      const restored = await call('PATCH', `/v1/agents/${agentId}`, { token, json: { upstream_url: upstream.url } });
      assert.equal(restored.status, 200, restored.text);
      const resumed = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: mark,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(resumed.status, 202, resumed.text);
      assert.equal(receiptOf(resumed.headers['x-payment-response']).transaction, transaction);
      assert.equal((await waitForInvocation(token, agentId, resumed.json.invocation_id as string)).status, 'succeeded');
      assert.equal(received(mark), 1, 'ran once');
      await assertChargedOnce(payTo, payer.address, transaction);
    } finally {
      await gateway.close();
    }
  });

  it('transactional: terminated while its request is at the upstream, its live activity closes the row', async () => {
    const c = await callAtTheUpstream(stack().apiUrl);
    await stack().temporal.workflow.getHandle(c.id).terminate('an operator ended it');
    // The activity's next heartbeat finds its workflow gone; its cancellation ends the call.
    const row = await until('the row closed', async () => {
      const r = await rowOf(c.id);
      return r.status === 'failed' ? r : null;
    });
    assert.equal(row.error_class, 'workflow_terminated');
    assert.equal(row.request_body_id, null);
    assert.equal(await bodyKept(c.bodyId), false, 'the request body is deleted');
    await assertPaymentKept(c);
  });

  it('transactional: terminated while its request is at the upstream and its worker is gone, the check closes the row', async () => {
    const taskQueue = `crashing-${randomUUID()}`;
    const gateway = await gatewayOn(taskQueue);
    const worker = await startWorkerProcess(taskQueue);
    try {
      const c = await callAtTheUpstream(gateway.url);
      worker.kill('SIGKILL');
      await exited(worker);
      await stack().temporal.workflow.getHandle(c.id).terminate('an operator ended it');
      assert.equal((await rowOf(c.id)).status, 'running', 'nothing else will complete it');

      const check = checkUnfinishedCalls({ orm: stack().orm, temporal: stack().temporal, log, everyMs: 0, afterMs: 0 });
      await check.runOnce();
      await check.stop();
      const row = await rowOf(c.id);
      assert.equal(row.status, 'failed');
      assert.equal(row.error_class, 'workflow_terminated');
      assert.equal(row.request_body_id, null);
      assert.equal(await bodyKept(c.bodyId), false, 'the request body is deleted');
      await assertPaymentKept(c);
    } finally {
      worker.kill('SIGKILL');
      await gateway.close();
    }
  });

  async function assertChargedOnce(payTo: string, payerAddress: string, transaction: string): Promise<void> {
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: transaction, value: PRICE }], 'one transfer');
    assert.equal(await balanceOf(provider, payerAddress), FUNDS - PRICE, 'charged once');
  }
});
