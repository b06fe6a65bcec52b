// A paid transactional call whose InvocationWorkflow cannot be started when it is accepted:
// the payment is settled and bound to the call's row in the accept commit, the caller gets its
// 202 with the payment receipt, and the call waits as an intent to start. Nothing runs it, and
// nothing releases its payment, until a start relay on a process that reaches Temporal starts
// it: then it runs once, paid once, and the same X-PAYMENT buys nothing more.
// The failing start is real, not a stub: a second gateway instance, on the same database,
// whose Temporal client names a namespace the server does not have, so the server refuses
// StartWorkflowExecution (NotFound) after the payment was settled and bound. (A payment settled
// for a call that was then not accepted at all is test/payment/settle-crash.test.ts.)
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import {
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { connectClient } from '../../temporal/client.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { startRelay } from '../../temporal/start-relay.ts';

describe('paid call accepted while its workflow cannot be started', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let facilitatorAccount: TestAccount;
  let token: string;
  let broken: { server: Server; url: string; close(): Promise<void> };

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    facilitatorAccount = await newAccount(`start-failure-${randomUUID()}`);
    token = await stack().token(`tenant-start-failure-${randomUUID()}`);
    const bundle = `${facilitatorAccount.cert.certPem}\n${facilitatorAccount.cert.keyPem}`;
    const credential = await call('POST', '/v1/credentials', {
      token,
      json: { name: 'facilitator-client', auth_type: 'none', source: 'managed', plaintext: bundle },
    });
    assert.equal(credential.status, 201, credential.text);
    const config = await call('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: stack().facilitator.url, facilitator_credential_ref: credential.json.id },
    });
    assert.equal(config.status, 201, config.text);

    const temporal = await connectClient(stack().infra.temporalAddress, `no-such-namespace-${randomUUID()}`);
    const server = await startGateway(stack().config, stack().orm, temporal, createLogger('api', 'silent'));
    broken = {
      server,
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      async close() {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
        await temporal.connection.close();
      },
    };
  });
  after(async () => {
    await broken.close();
    await upstream.close();
    await facilitatorAccount.client.close();
    provider.destroy();
  });

  const sql = <T>(query: string, params: unknown[]) => stack().orm.em.getConnection().execute<T[]>(query, params);

  it('answers 202 with the receipt; the call waits, paid and bound, until a relay starts it; it runs once', async () => {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('paid'),
        upstream_url: upstream.url,
        capture_body: true,
        pricing: { amount: '7000', asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.json.id;
    const payer = await newPayer(100_000n);
    const payment = await signPayment(payer, { payTo, value: 7_000n });
    const header = encodePayment(payment);
    const nonce = payment.payload.authorization.nonce.toLowerCase();
    const marker = `start-failure ${randomUUID()}`;
    const send = (base: string) =>
      callAt(base, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });

    const accepted = await send(broken.url);
    assert.equal(accepted.status, 202, accepted.text);
    assert.ok(accepted.headers['x-payment-response'], 'the receipt of the settlement that bought the call');
    const invocationId = accepted.json.invocation_id as string;
    // The payment was settled and bound with the row: the money moved, once, for this call.
    assert.equal(await balanceOf(provider, payTo), 7_000n);
    const [claim] = await sql<{ invocation_id: string | null; status: string; transaction: string | null }>(
      'select invocation_id, status, transaction from payment_claims where nonce = ?',
      [nonce],
    );
    assert.equal(claim.invocation_id, invocationId, 'the payment is bound to the accepted call');
    assert.equal(claim.status, 'settled');
    assert.match(claim.transaction ?? '', /^0x[0-9a-f]{64}$/);
    // Its start failed: the call waits, pending, sent nowhere, readable at once on any replica
    // (and started by no one until the relay below: the relay finds it still to start).
    const waiting = await callAt(stack().apiUrl, 'GET', `/v1/proxy/${agentId}/invocations/${invocationId}`, { token });
    assert.equal(waiting.status, 200, waiting.text);
    assert.equal(waiting.json.status, 'pending');
    assert.equal(upstream.received.filter((r) => r.body.toString() === marker).length, 0);
    assert.equal((await send(stack().apiUrl)).status, 402, 'the payment buys no second call meanwhile');

    // A relay on a process that reaches Temporal starts it.
    const relay = startRelay({
      orm: stack().orm,
      temporal: stack().temporal,
      taskQueue: stack().config.temporal.taskQueue,
      startDeadlineMs: stack().config.workflowStartDeadlineMs,
      log: createLogger('relay', 'silent'),
      everyMs: 0,
      afterMs: 0,
    });
    assert.ok((await relay.runOnce()) >= 1, 'the relay started the waiting call');
    await relay.stop();
    const done = await waitForInvocation(token, agentId, invocationId);
    assert.equal(done.status, 'succeeded');
    assert.equal(
      upstream.received.filter((r) => r.body.toString() === marker).length,
      1,
      'the call it paid for ran once',
    );
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: claim.transaction, value: 7_000n }]);
    const [row] = await sql<{ payment_transaction: string | null; payment_nonce: string | null }>(
      'select payment_transaction, payment_nonce from invocations where id = ?',
      [invocationId],
    );
    assert.equal(row.payment_transaction, claim.transaction);
    assert.equal(row.payment_nonce, nonce);

    const again = await send(stack().apiUrl);
    assert.equal(again.status, 402, 'bound now: one payment, one call');
    assert.deepEqual(again.json, { error: 'payment already used' });
  });
});
