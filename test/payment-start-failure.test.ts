// A paid transactional call whose InvocationWorkflow cannot be started: the gateway answers
// 503, removes the call's row (nothing will run it) and releases the payment bound to it, so
// the money already collected is not lost. The same X-PAYMENT retried later buys the call it
// paid for: it binds to the new invocation without settling again (one transfer on chain),
// and after that it is used.
// The failing start is real, not a stub: a second gateway instance, on the same database,
// whose Temporal client names a namespace the server does not have, so the server refuses
// StartWorkflowExecution (NotFound) after the payment was settled and bound.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from './support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation } from './support/http.ts';
import { startUpstream, type TestUpstream } from './support/upstream.ts';
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
} from './support/x402.ts';
import { connectClient } from '../temporal/client.ts';
import { startGateway } from '../api/gateway.ts';
import { createLogger } from '../lib/log.ts';
import { deactivateAccount } from '../facilitator/accounts.ts';

describe('paid call whose workflow start fails', function () {
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

  it('a settled payment whose call was not accepted resumes with the same header after its validBefore has passed', async () => {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('paid'),
        upstream_url: upstream.url,
        pricing: { amount: '3000', asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    const other = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('paid'),
        upstream_url: upstream.url,
        pricing: { amount: '3000', asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    const payer = await newPayer(100_000n);
    const validBefore = Math.floor(Date.now() / 1000) + 9;
    const header = encodePayment(await signPayment(payer, { payTo, value: 3_000n, validBefore }));
    const marker = `expired-resume ${randomUUID()}`;
    const send = (base: string, agentId = created.json.id as string) =>
      callAt(base, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });

    const failed = await send(broken.url);
    assert.equal(failed.status, 503, failed.text);
    assert.equal(await balanceOf(provider, payTo), 3_000n, 'settled before the start failed');
    while (Math.floor(Date.now() / 1000) < validBefore + 1) await new Promise((r) => setTimeout(r, 250));

    // Past validBefore: another agent (another call) is refused as an expired payment...
    const elsewhere = await send(stack().apiUrl, other.json.id);
    assert.equal(elsewhere.status, 402, elsewhere.text);
    // ...while the call it paid for is bought by the settled claim, nothing settled again.
    const resumed = await send(stack().apiUrl);
    assert.equal(resumed.status, 202, resumed.text);
    assert.equal((await waitForInvocation(token, created.json.id, resumed.json.invocation_id)).status, 'succeeded');
    assert.equal((await transfersTo(provider, payTo)).length, 1, 'one transfer on chain');
    assert.equal(await balanceOf(provider, payTo), 3_000n);
    assert.equal((await send(stack().apiUrl)).status, 402, 'bound now');
  });

  it('answers 503, leaves no pending row, releases the payment; the retry binds it to a new call without settling again', async () => {
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

    const failed = await send(broken.url);
    assert.equal(failed.status, 503, failed.text);
    // The payment was settled before the start was tried: the money moved, once.
    assert.equal(await balanceOf(provider, payTo), 7_000n);
    const [claim] = await sql<{ invocation_id: string | null; status: string; transaction: string | null }>(
      'select invocation_id, status, transaction from payment_claims where nonce = ?',
      [nonce],
    );
    assert.equal(claim.invocation_id, null, 'the payment is not left bound to a call that never runs');
    assert.equal(claim.status, 'settled');
    assert.match(claim.transaction ?? '', /^0x[0-9a-f]{64}$/);
    assert.deepEqual(
      await sql('select id, status from invocations where agent_id = ?', [agentId]),
      [],
      'no pending row is left',
    );
    assert.equal(upstream.received.filter((r) => r.body.toString() === marker).length, 0);

    // The tenant's facilitator account is switched off: a retry that asked the facilitator
    // again would get 403 (a 402 settlement_refused here), so a 202 shows it settled nothing.
    await deactivateAccount(stack().facilitator.pool, facilitatorAccount.account.id);
    const retried = await send(stack().apiUrl);
    assert.equal(retried.status, 202, retried.text);
    const done = await waitForInvocation(token, agentId, retried.json.invocation_id);
    assert.equal(done.status, 'succeeded');
    assert.equal(
      upstream.received.filter((r) => r.body.toString() === marker).length,
      1,
      'the call it paid for ran once',
    );
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: claim.transaction, value: 7_000n }]);
    const [bound] = await sql<{ invocation_id: string | null; transaction: string | null }>(
      'select invocation_id, transaction from payment_claims where nonce = ?',
      [nonce],
    );
    assert.equal(bound.invocation_id, retried.json.invocation_id, 'bound to the new call');
    const [row] = await sql<{ payment_transaction: string | null; payment_nonce: string | null }>(
      'select payment_transaction, payment_nonce from invocations where id = ?',
      [retried.json.invocation_id],
    );
    assert.equal(row.payment_transaction, claim.transaction);
    assert.equal(row.payment_nonce, nonce);
    assert.equal(retried.headers['x-payment-response'] !== undefined, true);

    const again = await send(stack().apiUrl);
    assert.equal(again.status, 402, 'bound now: one payment, one call');
    assert.deepEqual(again.json, { error: 'payment already used' });
  });
});
