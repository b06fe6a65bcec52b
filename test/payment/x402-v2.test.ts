// The x402 v2 dialect end to end on the real stack: unmodified @x402 v2 clients (a v2-only
// x402Client with ExactEvmScheme, and the default registerExactEvmScheme client with its v1
// fallback), wrapped by @x402/fetch, pay priced agents through the gateway and the facilitator
// on the transactional, streaming and MCP paths. One authorization is one payment whatever its
// envelope: a v1 payment re-wrapped as v2, or the reverse, is refused and charged nothing. Every
// payment 402 carries a PAYMENT-REQUIRED header that @x402/core decodes and its schema accepts.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { getAddress, toQuantity, type Wallet } from 'ethers';
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  decodePaymentSignatureHeader,
  encodePaymentSignatureHeader,
} from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { declarePaymentIdentifierExtension } from '@x402/extensions/payment-identifier';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { closedPort } from '../support/proxy-helpers.ts';
import { until } from '../support/facilitator.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { payingFetch } from '../support/paying-client.ts';
import {
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';

const NETWORK = 'eip155:8453';

/** The 402's PAYMENT-REQUIRED header, decoded by @x402/core and accepted by its v2 schema. */
function paymentRequiredOf(res: Reply) {
  const header = res.headers['payment-required'];
  assert.equal(typeof header, 'string', `a ${res.status} carries PAYMENT-REQUIRED`);
  return PaymentRequiredV2Schema.parse(decodePaymentRequiredHeader(header as string));
}

type Required = ReturnType<typeof paymentRequiredOf>;

/** A PAYMENT-SIGNATURE header as @x402/core encodes one: this authorization, accepting the 402's first entry. */
function signatureHeader(required: Required, payload: Record<string, unknown>): string {
  const entry = required.accepts[0];
  const accepted = { ...entry, network: entry.network as `${string}:${string}`, extra: entry.extra ?? {} };
  return encodePaymentSignatureHeader({ x402Version: 2, resource: required.resource, accepted, payload });
}

describe('x402 v2 dialect through the gateway and the facilitator', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let facilitatorAccount: TestAccount;
  let token: string;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    facilitatorAccount = await newAccount(`gateway-v2-${randomUUID()}`);
    token = await settlingTenant(`tenant-x402-v2-${randomUUID()}`, facilitatorAccount);
  });
  after(async () => {
    await upstream.close();
    await facilitatorAccount.client.close();
    provider.destroy();
  });

  async function pricedAgent(
    amount: string,
    extra: Record<string, unknown> = {},
  ): Promise<{ id: string; payTo: string }> {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('v2'),
        upstream_url: upstream.url,
        capture_body: true,
        pricing: { amount, asset: 'USDC', network: 'base', pay_to: payTo },
        ...extra,
      },
    });
    assert.equal(created.status, 201, created.text);
    return { id: created.json.id, payTo };
  }

  const received = (marker: string) => upstream.received.filter((r) => r.body.toString().includes(marker)).length;
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    call('POST', path, { token, body, headers: { 'content-type': 'text/plain', ...headers } });

  /** The receipt of a paid answer: PAYMENT-RESPONSE only, naming this payer and a transfer of `price` to `payTo` on chain. */
  async function assertSettled(res: Response, payer: Wallet, payTo: string, price: bigint): Promise<string> {
    assert.equal(res.headers.get('x-payment-response'), null, 'a v2 payment is answered in PAYMENT-RESPONSE only');
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    assert.equal(receipt.success, true);
    assert.equal(receipt.network, NETWORK);
    assert.equal(getAddress(receipt.payer!), payer.address);
    assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: price }]);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - price, 'the payer paid the price once');
    return receipt.transaction;
  }

  for (const kind of ['v2-only', 'default'] as const) {
    it(`${kind} client: pays the transactional endpoint in v2 (PAYMENT-REQUIRED, PAYMENT-SIGNATURE, PAYMENT-RESPONSE), settled and forwarded once`, async () => {
      const agent = await pricedAgent('25000');
      const payer = await newPayer(1_000_000n);
      const url = `${stack().apiUrl}/v1/proxy/${agent.id}`;
      const marker = `v2 ${kind} ${randomUUID()}`;

      // The challenge: the v1 body as before, and the v2 one in PAYMENT-REQUIRED.
      const challenge = await post(`/v1/proxy/${agent.id}`, marker);
      assert.equal(challenge.status, 402);
      assert.equal(challenge.json.x402Version, 1);
      assert.deepEqual(paymentRequiredOf(challenge), {
        x402Version: 2,
        error: 'PAYMENT-SIGNATURE header is required',
        resource: { url, description: challenge.json.accepts[0].description, mimeType: '' },
        accepts: [
          {
            scheme: 'exact',
            network: NETWORK,
            amount: '25000',
            asset: stack().infra.tokenAddress,
            payTo: agent.payTo,
            maxTimeoutSeconds: 60,
            extra: { name: 'USD Coin', version: '2' },
          },
        ],
        // Declared, not required (test/payment/payment-identifier.test.ts).
        extensions: { 'payment-identifier': declarePaymentIdentifierExtension(false) },
      });

      const { pay, sent } = payingFetch(kind, payer);
      const res = await pay(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
        body: marker,
      });
      assert.equal(res.status, 202, await res.clone().text());
      assert.deepEqual(
        sent.map((s) => s.status),
        [402, 202],
      );
      assert.ok(sent[1].signature, 'paid with PAYMENT-SIGNATURE');
      assert.equal(sent[1].xPayment, null);
      const transaction = await assertSettled(res, payer, agent.payTo, 25_000n);

      const { invocation_id: invocationId } = (await res.json()) as { invocation_id: string };
      const done = await waitForInvocation(token, agent.id, invocationId);
      assert.equal(done.status, 'succeeded');
      assert.equal(done.payment_network, 'base', 'recorded under the v1 network name, as the claim is keyed');
      assert.equal(done.payment_amount, '25000');
      assert.equal(done.payment_payer, payer.address);
      const { authorization } = decodePaymentSignatureHeader(sent[1].signature!).payload as {
        authorization: { nonce: string };
      };
      assert.equal(done.payment_nonce, authorization.nonce.toLowerCase());
      const rows = await stack()
        .orm.em.getConnection()
        .execute<Array<{ payment_transaction: string }>>('select payment_transaction from invocations where id = ?', [
          invocationId,
        ]);
      assert.equal(rows[0].payment_transaction, transaction);
      assert.equal(received(marker), 1, 'forwarded exactly once');
      assert.ok(
        upstream.received
          .filter((r) => r.body.toString().includes(marker))
          .every((r) => r.headers['payment-signature'] === undefined),
        'the payment never reaches the upstream',
      );

      // The same PAYMENT-SIGNATURE again: refused on both endpoints, nothing moves.
      for (const path of ['', '/stream']) {
        const replay = await post(`/v1/proxy/${agent.id}${path}`, marker, { 'payment-signature': sent[1].signature! });
        assert.equal(replay.status, 402, path);
        assert.deepEqual(replay.json, { error: 'payment already used' });
        assert.equal(paymentRequiredOf(replay).error, 'payment already used');
      }
      assert.equal(received(marker), 1);
      assert.equal(await balanceOf(provider, agent.payTo), 25_000n);
    });

    it(`${kind} client: pays the streaming endpoint in v2, the receipt in the head of the streamed answer`, async () => {
      const agent = await pricedAgent('3000');
      const payer = await newPayer(1_000_000n);
      const marker = `v2 stream ${kind} ${randomUUID()}`;
      const { pay, sent } = payingFetch(kind, payer);
      const res = await pay(`${stack().apiUrl}/v1/proxy/${agent.id}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
        body: marker,
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.deepEqual(await res.json(), { echo: marker });
      assert.deepEqual(
        sent.map((s) => [s.status, Boolean(s.signature), Boolean(s.xPayment)]),
        [
          [402, false, false],
          [200, true, false],
        ],
      );
      assert.ok(res.headers.get('x-gateway-invocation-id'));
      await assertSettled(res, payer, agent.payTo, 3_000n);
      assert.equal(received(marker), 1);
    });
  }

  it('charges an MCP tool its own price in v2 on the streaming endpoint', async () => {
    const payTo = newPayTo();
    const agent = await pricedAgent('1000', {
      pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: payTo, tools: { summarize: '7000' } },
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
      mcp_protocol_version: '2025-06-18',
    });
    agent.payTo = payTo;
    const payer = await newPayer(1_000_000n);
    const marker = randomUUID();
    const toolCall = JSON.stringify({
      jsonrpc: '2.0',
      id: marker,
      method: 'tools/call',
      params: { name: 'summarize', arguments: { text: marker } },
    });
    const challenge = await call('POST', `/v1/proxy/${agent.id}/stream`, {
      token,
      body: toolCall,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(challenge.status, 402);
    const required = paymentRequiredOf(challenge);
    assert.equal(required.accepts[0].amount, '7000');
    assert.equal(required.resource.mimeType, 'application/json');
    assert.equal(required.resource.description, challenge.json.accepts[0].description);

    const { pay } = payingFetch('v2-only', payer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agent.id}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: toolCall,
    });
    assert.equal(res.status, 200, await res.clone().text());
    await res.arrayBuffer();
    await assertSettled(res, payer, agent.payTo, 7_000n);
    assert.equal(received(marker), 1);
  });

  it('one authorization is one payment across dialects: a v1 payment re-wrapped as v2, and a v2 one re-wrapped as v1, are refused', async () => {
    // v1 first, then the same authorization in a v2 envelope.
    const first = await pricedAgent('4000');
    const payer = await newPayer(1_000_000n);
    const v1 = await signPayment(payer, { payTo: first.payTo, value: 4_000n });
    const marker = `cross ${randomUUID()}`;
    const paid = await post(`/v1/proxy/${first.id}`, marker, { 'x-payment': encodePayment(v1) });
    assert.equal(paid.status, 202, paid.text);
    assert.ok(paid.headers['x-payment-response'], 'v1 is answered in X-PAYMENT-RESPONSE');
    assert.equal(paid.headers['payment-response'], undefined);
    const challenge = await post(`/v1/proxy/${first.id}`, marker);
    const required = paymentRequiredOf(challenge);
    const rewrapped = signatureHeader(required, v1.payload);
    for (const path of ['', '/stream']) {
      const replay = await post(`/v1/proxy/${first.id}${path}`, marker, { 'payment-signature': rewrapped });
      assert.equal(replay.status, 402, `${path}: ${replay.text}`);
      assert.deepEqual(replay.json, { error: 'payment already used' });
    }
    await waitForInvocation(token, first.id, paid.json.invocation_id);
    assert.equal(received(marker), 1);
    assert.equal(await balanceOf(provider, first.payTo), 4_000n);

    // v2 first (an unmodified client), then the same authorization in a v1 envelope.
    const second = await pricedAgent('4000');
    const marker2 = `cross-back ${randomUUID()}`;
    const { pay, sent } = payingFetch('v2-only', payer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${second.id}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: marker2,
    });
    assert.equal(res.status, 202, await res.clone().text());
    await waitForInvocation(token, second.id, ((await res.json()) as { invocation_id: string }).invocation_id);
    const v2 = decodePaymentSignatureHeader(sent[1].signature!);
    const asV1 = encodePayment({ x402Version: 1, scheme: 'exact', network: 'base', payload: v2.payload as any });
    for (const path of ['', '/stream']) {
      const replay = await post(`/v1/proxy/${second.id}${path}`, marker2, { 'x-payment': asV1 });
      assert.equal(replay.status, 402, `${path}: ${replay.text}`);
      assert.deepEqual(replay.json, { error: 'payment already used' });
      assert.equal(paymentRequiredOf(replay).error, 'payment already used');
    }
    assert.equal(received(marker2), 1);
    assert.equal(await balanceOf(provider, second.payTo), 4_000n);
    assert.equal(
      await balanceOf(provider, payer.address),
      1_000_000n - 8_000n,
      'two authorizations, two payments, nothing more',
    );
  });

  it('concurrent requests with one PAYMENT-SIGNATURE: one call on each endpoint, every other answer a 402 with PAYMENT-REQUIRED', async () => {
    for (const path of ['', '/stream']) {
      const agent = await pricedAgent('2000');
      const payer = await newPayer(1_000_000n);
      const marker = `race v2 ${randomUUID()}`;
      const required = paymentRequiredOf(await post(`/v1/proxy/${agent.id}${path}`, marker));
      const header = signatureHeader(
        required,
        (await signPayment(payer, { payTo: agent.payTo, value: 2_000n })).payload,
      );
      const replies = await Promise.all(
        Array.from({ length: 8 }, () => post(`/v1/proxy/${agent.id}${path}`, marker, { 'payment-signature': header })),
      );
      const ok = path ? 200 : 202;
      assert.equal(
        replies.filter((r) => r.status === ok).length,
        1,
        `${path}: ${JSON.stringify(replies.map((r) => r.status))}`,
      );
      for (const refused of replies.filter((r) => r.status !== ok)) {
        assert.equal(refused.status, 402, `${path}: ${refused.text}`);
        assert.equal(paymentRequiredOf(refused).error, refused.json.error);
      }
      const accepted = replies.find((r) => r.status === ok)!;
      if (!path) await waitForInvocation(token, agent.id, accepted.json.invocation_id);
      assert.equal(received(marker), 1);
      assert.equal(await balanceOf(provider, agent.payTo), 2_000n);
    }
  });

  it('refuses a malformed or non-matching PAYMENT-SIGNATURE, or both headers at once, with 402 invalid payment before anything moves', async () => {
    const agent = await pricedAgent('5000');
    const payer = await newPayer(100_000n);
    const marker = `bad v2 ${randomUUID()}`;
    const required = paymentRequiredOf(await post(`/v1/proxy/${agent.id}`, marker));
    const accepted = required.accepts[0];
    const good = await signPayment(payer, { payTo: agent.payTo, value: 5_000n });
    const v2 = (payload: unknown, override: Record<string, unknown> = {}) =>
      Buffer.from(
        JSON.stringify({ x402Version: 2, resource: required.resource, accepted, payload, ...override }),
      ).toString('base64');
    const headers: Record<string, Record<string, string>> = {
      'not base64': { 'payment-signature': 'not base64 at all!' },
      'not JSON': { 'payment-signature': Buffer.from('{"x402Version":2,').toString('base64') },
      'JSON null': { 'payment-signature': Buffer.from('null').toString('base64') },
      'no accepted': {
        'payment-signature': Buffer.from(JSON.stringify({ x402Version: 2, payload: good.payload })).toString('base64'),
      },
      'a v1 payment': { 'payment-signature': encodePayment(good) },
      'version as a string': { 'payment-signature': v2(good.payload, { x402Version: '2' }) },
      'v1 network name': { 'payment-signature': v2(good.payload, { accepted: { ...accepted, network: 'base' } }) },
      'another chain': {
        'payment-signature': v2(good.payload, { accepted: { ...accepted, network: 'eip155:84532' } }),
      },
      'another amount accepted': {
        'payment-signature': v2(good.payload, { accepted: { ...accepted, amount: '4999' } }),
      },
      'another payTo accepted': {
        'payment-signature': v2(good.payload, { accepted: { ...accepted, payTo: newPayTo() } }),
      },
      'another scheme': { 'payment-signature': v2(good.payload, { accepted: { ...accepted, scheme: 'upto' } }) },
      'no signature': { 'payment-signature': v2({ authorization: good.payload.authorization }) },
      'authorization for less': {
        'payment-signature': v2((await signPayment(payer, { payTo: agent.payTo, value: 4_999n })).payload),
      },
      'authorization to another payee': {
        'payment-signature': v2((await signPayment(payer, { payTo: newPayTo(), value: 5_000n })).payload),
      },
      'forged signature': {
        'payment-signature': v2({
          ...good.payload,
          authorization: { ...good.payload.authorization, nonce: `0x${'ab'.repeat(32)}` },
        }),
      },
      'both headers': { 'payment-signature': v2(good.payload), 'x-payment': encodePayment(good) },
    };
    for (const [name, sent] of Object.entries(headers)) {
      for (const path of ['', '/stream']) {
        const res = await post(`/v1/proxy/${agent.id}${path}`, marker, sent);
        assert.equal(res.status, 402, `${name}${path}: ${res.status} ${res.text}`);
        assert.deepEqual(res.json, { error: 'invalid payment' }, name);
        assert.equal(paymentRequiredOf(res).error, 'invalid payment', name);
      }
    }
    assert.equal(received(marker), 0);
    assert.equal(await balanceOf(provider, agent.payTo), 0n);
    // The same authorization, sent alone, still buys the call: refusing both headers claimed nothing.
    const alone = await post(`/v1/proxy/${agent.id}`, marker, { 'payment-signature': v2(good.payload) });
    assert.equal(alone.status, 202, alone.text);
    assert.equal(await balanceOf(provider, agent.payTo), 5_000n);
  });

  it('a payer without funds: 402 settlement_failed with PAYMENT-REQUIRED, never forwarded', async () => {
    const agent = await pricedAgent('9000');
    const { pay, sent } = payingFetch('v2-only', await newPayer(0n));
    const marker = `poor v2 ${randomUUID()}`;
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agent.id}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: marker,
    });
    assert.equal(res.status, 402);
    assert.deepEqual(
      sent.map((s) => s.status),
      [402, 402],
    );
    assert.equal(
      PaymentRequiredV2Schema.parse(decodePaymentRequiredHeader(res.headers.get('payment-required')!)).error,
      'settlement_failed',
    );
    assert.deepEqual(await res.json(), { error: 'settlement_failed' });
    assert.equal(received(marker), 0);
  });

  it('policy runs before payment in v2 too: a denied call is a 403 and charges nothing', async () => {
    const agent = await pricedAgent('2000');
    const policy = await call('PUT', '/v1/policy', {
      token,
      json: { default: 'allow', on_error: 'allow', rules: [{ action: 'deny', match: { agents: [agent.id] } }] },
    });
    assert.ok([200, 201].includes(policy.status), policy.text);
    try {
      const payer = await newPayer(1_000_000n);
      const { pay, sent } = payingFetch('v2-only', payer);
      const res = await pay(`${stack().apiUrl}/v1/proxy/${agent.id}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
        body: 'denied',
      });
      assert.equal(res.status, 403);
      assert.deepEqual(
        sent.map((s) => s.status),
        [403],
        'never told to pay',
      );
      const forced = await post(`/v1/proxy/${agent.id}`, 'denied', {
        'payment-signature': encodePaymentSignatureHeader({
          x402Version: 2,
          resource: { url: 'x' },
          accepted: {
            scheme: 'exact',
            network: NETWORK,
            amount: '2000',
            asset: stack().infra.tokenAddress,
            payTo: agent.payTo,
            maxTimeoutSeconds: 60,
            extra: {},
          },
          payload: (await signPayment(payer, { payTo: agent.payTo, value: 2_000n })).payload,
        }),
      });
      assert.equal(forced.status, 403);
      assert.equal(await balanceOf(provider, agent.payTo), 0n);
    } finally {
      await call('PUT', '/v1/policy', { token, json: { default: 'allow', on_error: 'allow', rules: [] } });
    }
  });

  it('503 while the payment is still settling; the same PAYMENT-SIGNATURE then resumes it, settled once', async () => {
    const agent = await pricedAgent('6000');
    const payer = await newPayer(1_000_000n);
    const marker = `resume v2 ${randomUUID()}`;
    const required = paymentRequiredOf(await post(`/v1/proxy/${agent.id}`, marker));
    const header = signatureHeader(required, (await signPayment(payer, { payTo: agent.payTo, value: 6_000n })).payload);
    const wallet = stack().facilitator.gasWallet;
    const saved = await provider.getBalance(wallet);
    await provider.send('anvil_setBalance', [wallet, '0x0']);
    let first: Reply;
    try {
      first = await post(`/v1/proxy/${agent.id}`, marker, { 'payment-signature': header });
    } finally {
      await provider.send('anvil_setBalance', [wallet, toQuantity(saved)]);
    }
    assert.equal(first.status, 503, first.text);
    assert.deepEqual(first.json, { error: 'payment is still settling; retry with the same payment header' });
    assert.equal(first.headers['payment-required'], undefined, 'not a challenge: the payer must not sign again');
    assert.equal(received(marker), 0);

    const retried = await post(`/v1/proxy/${agent.id}`, marker, { 'payment-signature': header });
    assert.equal(retried.status, 202, retried.text);
    const receipt = decodePaymentResponseHeader(String(retried.headers['payment-response']));
    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: receipt.transaction, value: 6_000n }]);
    await waitForInvocation(token, agent.id, retried.json.invocation_id);
    assert.equal(received(marker), 1);
    assert.equal(
      (await post(`/v1/proxy/${agent.id}`, marker, { 'payment-signature': header })).status,
      402,
      'bound now',
    );
  });

  it('a settled v2 payment whose call was not accepted is bound again without settling, also once its authorization expired', async () => {
    const agent = await pricedAgent('3500');
    const payer = await newPayer(1_000_000n);
    const marker = `settled v2 ${randomUUID()}`;
    const required = paymentRequiredOf(await post(`/v1/proxy/${agent.id}/stream`, marker));
    const now = Math.floor(Date.now() / 1000);
    // Valid for 12 s: the first call has 6 s before the gate's margin, and the wait past it is short.
    const validBefore = now + 12;
    const payment = await signPayment(payer, { payTo: agent.payTo, value: 3_500n, validBefore });
    const header = signatureHeader(required, payment.payload);
    const nonce = payment.payload.authorization.nonce.toLowerCase();
    // Stands in for a call whose binding was released (a workflow that could not be started).
    const release = () =>
      stack().orm.em.getConnection().execute('update payment_claims set invocation_id = null where nonce = ?', [nonce]);

    const paid = await post(`/v1/proxy/${agent.id}/stream`, marker, { 'payment-signature': header });
    assert.equal(paid.status, 200, paid.text);
    const { transaction } = decodePaymentResponseHeader(String(paid.headers['payment-response']));

    await release();
    const rebound = await post(`/v1/proxy/${agent.id}/stream`, marker, { 'payment-signature': header });
    assert.equal(rebound.status, 200, rebound.text);
    assert.equal(decodePaymentResponseHeader(String(rebound.headers['payment-response'])).transaction, transaction);

    await release();
    // Past validBefore minus the 6 s margin: only the settled claim can still buy the call.
    await until('validBefore minus the margin to pass', async () =>
      Date.now() / 1000 > validBefore - 6 + 1 ? true : null,
    );
    const expired = await post(`/v1/proxy/${agent.id}/stream`, marker, { 'payment-signature': header });
    assert.equal(expired.status, 200, expired.text);
    const receipt = decodePaymentResponseHeader(String(expired.headers['payment-response']));
    assert.equal(receipt.transaction, transaction);
    assert.equal(receipt.network, NETWORK);

    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: transaction, value: 3_500n }], 'settled once');
    assert.equal(received(marker), 3);
  });

  it('the OpenAPI document declares the v2 headers on both proxy operations', async () => {
    const doc = (await call('GET', '/v1/openapi.json')).json;
    for (const [path, ok] of [
      ['/v1/proxy/{id}', '202'],
      ['/v1/proxy/{id}/stream', 'default'],
    ]) {
      const op = doc.paths[path].post;
      const params = op.parameters
        .filter((p: { in: string }) => p.in === 'header')
        .map((p: { name: string }) => p.name);
      assert.ok(params.includes('X-PAYMENT') && params.includes('PAYMENT-SIGNATURE'), path);
      assert.ok(op.responses['402'].headers['PAYMENT-REQUIRED'], path);
      assert.ok(op.responses[ok].headers['PAYMENT-RESPONSE'] && op.responses[ok].headers['X-PAYMENT-RESPONSE'], path);
    }
  });

  it('a streaming call settled in v2 and then failed upstream still carries PAYMENT-RESPONSE', async () => {
    const agent = await pricedAgent('4000', { upstream_url: `http://127.0.0.1:${await closedPort()}/agent` });
    const payer = await newPayer(1_000_000n);
    const { pay } = payingFetch('v2-only', payer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agent.id}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: 'x',
    });
    assert.equal(res.status, 502, await res.clone().text());
    await assertSettled(res, payer, agent.payTo, 4_000n);
  });
});
