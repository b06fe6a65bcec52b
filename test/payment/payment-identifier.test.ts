// The x402 payment-identifier extension on the real stack: a v2 payer (@x402/core's client with
// @x402/evm's ExactEvmScheme, the id added with @x402/extensions) that resends the same payment
// under the same identifier gets the first attempt's answer (the same invocation, the same
// transaction, one transfer on chain, one upstream call); another authorization under a known
// identifier is refused with 409 and collects nothing; the identifier is the payer's own (another
// payer may use the same string).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Wallet } from 'ethers';
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from '@x402/core/http';
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { waitFor } from '../support/wait.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { stack } from '../support/stack.ts';
import { recordPayment } from '../../gateway/payment/binding.ts';
import {
  balanceOf,
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  transfersTo,
  v2PayerClient,
  type TestAccount,
} from '../support/x402.ts';

const PRICE = 6_000n;

describe('x402 payment-identifier: a retry gets the first outcome, never a second charge', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let facilitatorAccount: TestAccount;
  let token: string;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    facilitatorAccount = await newAccount(`gateway-payment-id-${randomUUID()}`);
    token = await settlingTenant(`tenant-payment-id-${randomUUID()}`, facilitatorAccount);
  });
  after(async () => {
    await upstream.close();
    await facilitatorAccount.client.close();
    provider.destroy();
  });

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    call('POST', path, { token, body, headers: { 'content-type': 'text/plain', ...headers } });
  async function pricedAgent(prefix: string): Promise<{ agentId: string; payTo: string }> {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName(prefix),
        upstream_url: upstream.url,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    return { agentId: created.json.id as string, payTo };
  }
  const received = (marker: string) => upstream.received.filter((r) => r.body.toString().includes(marker)).length;

  /** A PAYMENT-SIGNATURE header built by @x402/core from the 402's PAYMENT-REQUIRED, carrying `paymentId`. */
  async function signedWithId(payer: Wallet, path: string, paymentId: string, unchecked = false): Promise<string> {
    const challenge = await post(path, 'challenge');
    assert.equal(challenge.status, 402, challenge.text);
    const required = decodePaymentRequiredHeader(challenge.headers['payment-required'] as string);
    assert.deepEqual((required.extensions?.['payment-identifier'] as { info: unknown }).info, { required: false });
    const payload = await v2PayerClient(payer).createPaymentPayload(required);
    if (unchecked) {
      // As a careless client would send it: the helper refuses to build a malformed id.
      const declared = payload.extensions?.['payment-identifier'] as Record<string, unknown>;
      payload.extensions = {
        ...payload.extensions,
        'payment-identifier': { ...declared, info: { required: false, id: paymentId } },
      };
    } else payload.extensions = appendPaymentIdentifierToExtensions(payload.extensions ?? {}, paymentId);
    return encodePaymentSignatureHeader(payload);
  }

  it('answers a resend under the same identifier with the first invocation and transaction, and refuses another authorization under it with 409', async () => {
    const { agentId, payTo } = await pricedAgent('payment-id');
    const path = `/v1/proxy/${agentId}`;
    const payer = await newPayer(1_000_000n);
    const paymentId = generatePaymentId();
    const header = await signedWithId(payer, path, paymentId);
    const marker = `payment id ${randomUUID()}`;

    const first = await post(path, marker, { 'payment-signature': header });
    assert.equal(first.status, 202, first.text);
    const invocationId = first.json.invocation_id as string;
    const receipt = decodePaymentResponseHeader(first.headers['payment-response'] as string);
    await waitForInvocation(token, agentId, invocationId);

    // The same payment under the same identifier: the first answer, nothing called or charged again.
    const again = await post(path, marker, { 'payment-signature': header });
    assert.equal(again.status, 202, again.text);
    assert.deepEqual(again.json, { invocation_id: invocationId });
    assert.equal(again.headers['x-gateway-invocation-id'], invocationId);
    assert.equal(
      decodePaymentResponseHeader(again.headers['payment-response'] as string).transaction,
      receipt.transaction,
    );

    // Another authorization under the same identifier: 409, nothing claimed or collected.
    const other = await signedWithId(payer, path, paymentId);
    const conflicting = await post(path, `${marker} other`, { 'payment-signature': other });
    assert.equal(conflicting.status, 409, conflicting.text);
    assert.equal(conflicting.headers['payment-response'], undefined);

    assert.equal(received(marker), 1, 'the upstream was called once');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: PRICE }]);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE, 'the payer paid once');

    // The identifier is the payer's own: another payer may send the same string.
    const otherPayer = await newPayer(1_000_000n);
    const theirs = await post(path, `${marker} theirs`, {
      'payment-signature': await signedWithId(otherPayer, path, paymentId),
    });
    assert.equal(theirs.status, 202, theirs.text);
    assert.notEqual(theirs.json.invocation_id, invocationId);
  });

  it('answers concurrent resends of one payment under one identifier with one invocation, never a 402', async () => {
    const { agentId, payTo } = await pricedAgent('payment-id-race');
    const path = `/v1/proxy/${agentId}`;
    const payer = await newPayer(1_000_000n);
    const header = await signedWithId(payer, path, generatePaymentId());
    const marker = `payment id race ${randomUUID()}`;
    const answers = await Promise.all(
      Array.from({ length: 4 }, () => post(path, marker, { 'payment-signature': header })),
    );
    const ids = new Set<string>();
    for (let res of answers) {
      // A 503 says resend the same payment: the resend gets the call that bound it, once the
      // binding has committed.
      if (res.status === 503)
        res = await waitFor(
          async () => {
            const again = await post(path, marker, { 'payment-signature': header });
            return again.status === 503 ? null : again;
          },
          { everyMs: 50, what: 'the resend to get the bound call' },
        );
      assert.equal(res.status, 202, res.text);
      ids.add(res.json.invocation_id as string);
    }
    assert.equal(ids.size, 1, 'one invocation for every resend');
    await waitForInvocation(token, agentId, [...ids][0]);
    assert.equal(received(marker), 1);
    assert.equal((await transfersTo(provider, payTo)).length, 1);
  });

  it('answers a resend under the identifier after the authorization expired with the first call, where without one it is refused', async () => {
    const { agentId, payTo } = await pricedAgent('payment-id-expired');
    const path = `/v1/proxy/${agentId}`;
    const payer = await newPayer(1_000_000n);
    const challenge = await post(path, 'challenge');
    const required = decodePaymentRequiredHeader(challenge.headers['payment-required'] as string);
    // Valid for 10 s: the gate wants 6 s left (X402_VALIDITY_MARGIN_S), so it expires for the gate 4 s from now.
    const validBefore = Math.floor(Date.now() / 1000) + 10;
    const signed = await signPayment(payer, { payTo, value: PRICE, validBefore });
    const header = (id: string | null) =>
      encodePaymentSignatureHeader({
        x402Version: 2,
        resource: required.resource,
        accepted: required.accepts[0],
        payload: signed.payload,
        ...(id ? { extensions: appendPaymentIdentifierToExtensions({ ...required.extensions }, id) } : {}),
      });
    const paymentId = generatePaymentId();
    const first = await post(path, 'expiring', { 'payment-signature': header(paymentId) });
    assert.equal(first.status, 202, first.text);
    await waitFor(() => Date.now() / 1000 > validBefore - 6, {
      timeoutMs: 15_000,
      what: 'the gate to see the payment expired',
    });

    const again = await post(path, 'expiring', { 'payment-signature': header(paymentId) });
    assert.equal(again.status, 202, again.text);
    assert.deepEqual(again.json, { invocation_id: first.json.invocation_id });
    const bare = await post(path, 'expiring', { 'payment-signature': header(null) });
    assert.equal(bare.status, 402, bare.text);
    assert.deepEqual(bare.json, { error: 'invalid payment' });
    assert.equal((await transfersTo(provider, payTo)).length, 1);
  });

  it('refuses a malformed identifier as an invalid payment, before anything is claimed', async () => {
    const { agentId } = await pricedAgent('payment-id-bad');
    const path = `/v1/proxy/${agentId}`;
    const payer = await newPayer(1_000_000n);
    const res = await post(path, 'bad id', { 'payment-signature': await signedWithId(payer, path, 'short', true) });
    assert.equal(res.status, 402, res.text);
    assert.deepEqual(res.json, { error: 'invalid payment' });
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n);
  });

  it('records one payment sent many times at once under its identifier as that payment, never as another (409)', async () => {
    // Inserts racing on the payment's own key may be refused by the identifier's index instead.
    const { agentId } = await pricedAgent('payment-id-insert-race');
    const tenantId = (await call('GET', `/v1/agents/${agentId}`, { token })).json.tenant_id as string;
    for (let round = 0; round < 20; round++) {
      const payment = {
        network: 'base',
        asset: '0xasset',
        payer: `0x${randomUUID().replaceAll('-', '').padEnd(40, '0')}`,
        nonce: `0x${randomUUID().replaceAll('-', '').padEnd(64, '0')}`,
        tenantId,
        agentId,
        amount: String(PRICE),
        paymentId: generatePaymentId(),
      };
      const states = (
        await Promise.all(Array.from({ length: 6 }, () => recordPayment(stack().orm.em.fork(), payment)))
      ).map((r) => r.state);
      assert.deepEqual(
        states.filter((state) => state !== 'resumed'),
        ['new'],
        `round ${round}: ${states.join(', ')}`,
      );
    }
  });
});
