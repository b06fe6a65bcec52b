// A real crash between settlement and acceptance: an API process asks the facilitator to
// settle (through a relay that holds the answer), the transfer lands on chain, and the process
// is SIGKILLed before it could record the settlement or accept the call. The claim stays
// bound to nothing. Once the authorization's validBefore has passed, the same X-PAYMENT sent
// to the same agent at the same price still buys the call it paid for: the claim is looked up
// before the window is checked, the facilitator answers its stored settlement (no second
// transfer), and the call runs once.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName } from '../support/http.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited } from '../support/worker-process.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startHoldingFacilitator, type HoldingFacilitator } from '../support/holding-facilitator.ts';
import { until } from '../support/facilitator.ts';
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

describe('payer: a crash between settlement and acceptance', function () {
  this.timeout(120_000);
  const PRICE = 4_000n;
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let account: TestAccount;
  let relay: HoldingFacilitator;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    account = await newAccount(`crash-${randomUUID()}`);
    relay = await startHoldingFacilitator({
      facilitatorUrl: stack().facilitator.url,
      pki: stack().infra.pki.files,
      account: account.cert,
    });
  });
  after(async () => {
    await relay.close();
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  it('the same header after validBefore buys the call it paid for, settled once', async () => {
    const api = await startApiProcess();
    const token = await stack().token(`crash-${randomUUID()}`);
    const credential = await callAt(api.url, 'POST', '/v1/credentials', {
      token,
      json: {
        name: 'facilitator-client',
        auth_type: 'none',
        source: 'managed',
        plaintext: `${account.cert.certPem}\n${account.cert.keyPem}`,
      },
    });
    assert.equal(credential.status, 201, credential.text);
    const relayed = await callAt(api.url, 'PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: relay.url, facilitator_credential_ref: credential.json.id },
    });
    assert.equal(relayed.status, 201, relayed.text);
    const payTo = newPayTo();
    const agent = await callAt(api.url, 'POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('crash'),
        upstream_url: upstream.url,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(agent.status, 201, agent.text);

    const payer = await newPayer(100_000n);
    // Valid for 10 s: long enough for the first call (the gate wants 6 s left), over soon after.
    const validBefore = Math.floor(Date.now() / 1000) + 10;
    const header = encodePayment(await signPayment(payer, { payTo, value: PRICE, validBefore }));
    const before = upstream.received.length;

    const lost = callAt(api.url, 'POST', `/v1/proxy/${agent.json.id}`, {
      token,
      body: 'x',
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    }).catch(() => null);
    const answer = await relay.held;
    assert.equal(answer.json.success, true, JSON.stringify(answer.json));
    api.child.kill('SIGKILL');
    await exited(api.child);
    assert.equal(await lost, null, 'the caller got no answer');
    assert.deepEqual(
      await transfersTo(provider, payTo),
      [{ hash: answer.json.transaction, value: PRICE }],
      'the payer was charged',
    );
    assert.equal(upstream.received.length, before, 'no call yet');

    // The tenant points its settlement at the facilitator itself; the authorization expires.
    const direct = await callAt(stack().apiUrl, 'PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: stack().facilitator.url, facilitator_credential_ref: credential.json.id },
    });
    assert.equal(direct.status, 200, direct.text);
    await until('validBefore to pass', async () => (Date.now() / 1000 > validBefore + 1 ? true : null));

    const resumed = await callAt(stack().apiUrl, 'POST', `/v1/proxy/${agent.json.id}`, {
      token,
      body: 'x',
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    });
    assert.equal(resumed.status, 202, resumed.text);
    const receipt = JSON.parse(
      Buffer.from(String(resumed.headers['x-payment-response']), 'base64').toString('utf8'),
    ) as { transaction: string };
    assert.equal(receipt.transaction, answer.json.transaction, 'the transaction of the crashed call');
    await until('the call', async () => (upstream.received.length > before ? true : null));
    assert.equal(upstream.received.length, before + 1);
    assert.deepEqual(
      await transfersTo(provider, payTo),
      [{ hash: answer.json.transaction, value: PRICE }],
      'one transfer',
    );
    assert.equal(await balanceOf(provider, payer.address), 100_000n - PRICE, 'charged once');
    assert.equal(
      (
        await callAt(stack().apiUrl, 'POST', `/v1/proxy/${agent.json.id}`, {
          token,
          body: 'x',
          headers: { 'content-type': 'text/plain', 'x-payment': header },
        })
      ).status,
      402,
      'it bought one call',
    );
  });
});
