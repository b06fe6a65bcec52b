// The payment gate end to end on the real stack: an unmodified x402 v1 client (x402-fetch,
// with a local private key) pays a priced agent through the gateway and the facilitator;
// balances move exactly once; the payment is recorded on the invocation; a replayed X-PAYMENT
// is refused; an MCP tool's own price is what is charged; without settlement configured the
// payment is verified and recorded only; the streaming path answers X-PAYMENT-RESPONSE.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { decodeXPaymentResponse } from 'x402-fetch';
import { getAddress, toQuantity, type JsonRpcProvider } from 'ethers';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import type { TestUpstream } from '../support/upstream.ts';
import { withPayingTenant } from '../support/settling.ts';
import { payingFetch } from '../support/paying-client.ts';
import { balanceOf, encodePayment, newPayTo, newPayer, signPayment, transfersTo } from '../support/x402.ts';

describe('x402 payment gate through the gateway and the facilitator', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let upstream: TestUpstream;
  let token: string;
  withPayingTenant('x402', (paying) => ({ provider, upstream, token } = paying));

  async function pricedAgent(
    as: string,
    pricing: Record<string, unknown>,
    extra: Record<string, unknown> = {},
  ): Promise<string> {
    const created = await call('POST', '/v1/agents', {
      token: as,
      json: { name: uniqueName('priced'), upstream_url: upstream.url, capture_body: true, pricing, ...extra },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id;
  }

  const received = (marker: string) => upstream.received.filter((r) => r.body.toString().includes(marker)).length;

  it('x402-fetch pays a priced agent: 402 challenge, then settled and forwarded once; balances move exactly once', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '25000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(1_000_000n);
    const url = `${stack().apiUrl}/v1/proxy/${agentId}`;

    // The challenge as the client sees it first: nothing recorded, nothing forwarded.
    const marker = `x402-fetch ${randomUUID()}`;
    const challenge = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain' },
    });
    assert.equal(challenge.status, 402);
    assert.equal(challenge.json.x402Version, 1);
    assert.equal(typeof challenge.json.error, 'string');
    assert.deepEqual(challenge.json.accepts, [
      {
        scheme: 'exact',
        network: 'base',
        maxAmountRequired: '25000',
        resource: url,
        description: challenge.json.accepts[0].description,
        mimeType: '',
        payTo,
        maxTimeoutSeconds: 60,
        asset: stack().infra.tokenAddress,
        extra: { name: 'USD Coin', version: '2' },
      },
    ]);
    assert.equal(received(marker), 0);
    assert.equal(await invocationCount(agentId), 0, 'no invocation record for a challenge');

    const { pay, sent } = payingFetch('x402-fetch', payer);
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
    assert.ok(sent[1].xPayment, 'the client paid with X-PAYMENT');
    const { invocation_id: invocationId } = (await res.json()) as { invocation_id: string };
    const receipt = decodeXPaymentResponse(res.headers.get('x-payment-response')!);
    assert.equal(receipt.success, true);
    assert.equal(receipt.network, 'base');
    assert.equal(getAddress(receipt.payer!), payer.address);
    assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/);

    const done = await waitForInvocation(token, agentId, invocationId);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.payment_network, 'base');
    assert.equal(done.payment_asset, stack().infra.tokenAddress);
    assert.equal(done.payment_amount, '25000');
    assert.equal(done.payment_payer, payer.address);
    assert.equal(
      done.payment_nonce,
      JSON.parse(Buffer.from(sent[1].xPayment!, 'base64').toString()).payload.authorization.nonce.toLowerCase(),
    );
    assert.equal(received(marker), 1, 'forwarded exactly once');

    assert.equal(await balanceOf(provider, payTo), 25_000n);
    assert.equal(await balanceOf(provider, payer.address), 975_000n);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: 25_000n }]);
    assert.equal(await txOf(invocationId), receipt.transaction, 'the transaction hash is kept with the invocation');

    // Replaying the same X-PAYMENT: refused, never forwarded again, nothing moves.
    const replay = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': sent[1].xPayment! },
    });
    assert.equal(replay.status, 402);
    assert.deepEqual(Object.keys(replay.json), ['error']);
    const replayStream = await call('POST', `/v1/proxy/${agentId}/stream`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': sent[1].xPayment! },
    });
    assert.equal(replayStream.status, 402);
    assert.equal(received(marker), 1);
    assert.equal(await balanceOf(provider, payTo), 25_000n);
  });

  async function invocationCount(agentId: string): Promise<number> {
    const rows = await stack()
      .orm.em.getConnection()
      .execute<Array<{ n: string }>>('select count(*) as n from invocations where agent_id = ?', [agentId]);
    return Number(rows[0].n);
  }

  async function txOf(invocationId: string): Promise<string | null> {
    const rows = await stack()
      .orm.em.getConnection()
      .execute<Array<{ payment_transaction: string | null }>>(
        'select payment_transaction from invocations where id = ?',
        [invocationId],
      );
    return rows[0]?.payment_transaction ?? null;
  }

  it('charges an MCP tool its own price (pricing.tools), and the flat price for other methods', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(
      token,
      { amount: '1000', asset: 'USDC', network: 'base', pay_to: payTo, tools: { summarize: '7000' } },
      { protocol: 'mcp', mcp_transport: 'streamable_http', mcp_protocol_version: '2025-06-18' },
    );
    const payer = await newPayer(1_000_000n);
    const url = `${stack().apiUrl}/v1/proxy/${agentId}`;
    const rpc = (method: string, params?: unknown) =>
      JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method, ...(params ? { params } : {}) });

    const toolCall = rpc('tools/call', { name: 'summarize', arguments: { text: 'x' } });
    const challenge = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: toolCall,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(challenge.status, 402);
    assert.equal(challenge.json.accepts[0].maxAmountRequired, '7000');
    assert.equal(challenge.json.accepts[0].mimeType, 'application/json');
    const list = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: rpc('tools/list'),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(list.json.accepts[0].maxAmountRequired, '1000');
    const otherTool = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: rpc('tools/call', { name: 'echo' }),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(otherTool.json.accepts[0].maxAmountRequired, '1000');

    const { pay } = payingFetch('x402-fetch', payer);
    const res = await pay(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: toolCall,
    });
    assert.equal(res.status, 202, await res.clone().text());
    const { invocation_id: invocationId } = (await res.json()) as { invocation_id: string };
    const done = await waitForInvocation(token, agentId, invocationId);
    assert.equal(done.mcp_tool, 'summarize');
    assert.equal(done.payment_amount, '7000');
    assert.equal(await balanceOf(provider, payTo), 7_000n);

    // A payment for the flat price does not buy the tool.
    const cheap = await signPayment(payer, { payTo, value: 1_000n });
    const refused = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: toolCall,
      headers: { 'content-type': 'application/json', 'x-payment': encodePayment(cheap) },
    });
    assert.equal(refused.status, 402);
    assert.equal(await balanceOf(provider, payTo), 7_000n);
  });

  it('refuses malformed and non-verifying payments with a coarse 402, before anything is claimed or forwarded', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '5000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(100_000n);
    const marker = `bad ${randomUUID()}`;
    const now = Math.floor(Date.now() / 1000);
    const wrongSigner = await signPayment(await newPayer(0n), { payTo, value: 5_000n });
    wrongSigner.payload.authorization.from = payer.address;
    const headers = [
      'not base64 at all!',
      Buffer.from('{"x402Version":1}').toString('base64'),
      encodePayment({ ...(await signPayment(payer, { payTo, value: 5_000n })), x402Version: 2 }),
      encodePayment({ ...(await signPayment(payer, { payTo, value: 5_000n })), network: 'base-sepolia' }),
      encodePayment(await signPayment(payer, { payTo: newPayTo(), value: 5_000n })),
      encodePayment(await signPayment(payer, { payTo, value: 4_999n })),
      encodePayment(await signPayment(payer, { payTo, value: 5_001n })),
      encodePayment(await signPayment(payer, { payTo, value: 5_000n, validBefore: now + 2 })),
      encodePayment(await signPayment(payer, { payTo, value: 5_000n, validAfter: now + 600 })),
      encodePayment(await signPayment(payer, { payTo, value: 5_000n, nonce: `0x${'0'.repeat(64)}` })),
      encodePayment(wrongSigner),
    ];
    for (const header of headers) {
      const res = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
      assert.equal(res.status, 402, header);
      assert.deepEqual(Object.keys(res.json), ['error']);
      assert.equal(res.json.error, 'invalid payment');
    }
    assert.equal(received(marker), 0);
    assert.equal(await balanceOf(provider, payTo), 0n);
  });

  it('maps a collection outcome to settlement_failed (402), never forwarding', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '9000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(0n);
    const payment = encodePayment(await signPayment(payer, { payTo, value: 9_000n }));
    const marker = `poor ${randomUUID()}`;
    const res = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': payment },
    });
    assert.equal(res.status, 402);
    assert.deepEqual(res.json, { error: 'settlement_failed' });
    assert.equal(received(marker), 0);
    assert.equal(await invocationCount(agentId), 0);
  });

  it('resumes a claimed but unsettled payment when the same X-PAYMENT is retried (facilitator unavailable, then back)', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '6000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(100_000n);
    const header = encodePayment(await signPayment(payer, { payTo, value: 6_000n }));
    const marker = `resume ${randomUUID()}`;
    const wallet = stack().facilitator.gasWallet;
    const saved = await provider.getBalance(wallet);
    await provider.send('anvil_setBalance', [wallet, '0x0']);
    let first;
    try {
      first = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': header },
      });
    } finally {
      await provider.send('anvil_setBalance', [wallet, toQuantity(saved)]);
    }
    // Not known to be uncollected: never a 402 (an x402 client would sign a second authorization).
    assert.equal(first.status, 503);
    assert.deepEqual(first.json, { error: 'payment is still settling; retry with the same payment header' });
    assert.ok(Number(first.headers['retry-after']) > 0);
    assert.equal(received(marker), 0);

    const retried = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    });
    assert.equal(retried.status, 202, retried.text);
    await waitForInvocation(token, agentId, retried.json.invocation_id);
    assert.equal(received(marker), 1);
    assert.equal(await balanceOf(provider, payTo), 6_000n);
    const again = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    });
    assert.equal(again.status, 402, 'bound now: one payment, one call');
    assert.equal(received(marker), 1);
  });

  it('concurrent requests with one X-PAYMENT: one call forwarded, the others refused', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '2000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(100_000n);
    const header = encodePayment(await signPayment(payer, { payTo, value: 2_000n }));
    const marker = `race ${randomUUID()}`;
    const replies = await Promise.all(
      Array.from({ length: 8 }, () =>
        call('POST', `/v1/proxy/${agentId}`, {
          token,
          body: marker,
          headers: { 'content-type': 'text/plain', 'x-payment': header },
        }),
      ),
    );
    const accepted = replies.filter((r) => r.status === 202);
    assert.equal(accepted.length, 1, JSON.stringify(replies.map((r) => r.status)));
    assert.ok(replies.every((r) => r.status === 202 || r.status === 402));
    await waitForInvocation(token, agentId, accepted[0].json.invocation_id);
    assert.equal(received(marker), 1);
    assert.equal(await invocationCount(agentId), 1);
    assert.equal(await balanceOf(provider, payTo), 2_000n);
  });

  it('settles before the stream opens and answers X-PAYMENT-RESPONSE on the streaming path', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(token, { amount: '3000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(100_000n);
    const marker = `stream ${randomUUID()}`;
    const { pay } = payingFetch('x402-fetch', payer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: marker,
    });
    assert.equal(res.status, 200, await res.clone().text());
    assert.deepEqual(await res.json(), { echo: marker });
    const receipt = decodeXPaymentResponse(res.headers.get('x-payment-response')!);
    assert.equal(receipt.success, true);
    assert.ok(res.headers.get('x-gateway-invocation-id'));
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: 3_000n }]);
    assert.equal(received(marker), 1);
  });

  it('without settlement configured, verifies and records the payment only (nothing moves on chain)', async () => {
    const other = await stack().token(`tenant-x402-verify-only-${randomUUID()}`);
    const payTo = newPayTo();
    const agentId = await pricedAgent(other, { amount: '4000', asset: 'USDC', network: 'base', pay_to: payTo });
    const payer = await newPayer(100_000n);
    const { pay } = payingFetch('x402-fetch', payer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${other}`, 'content-type': 'text/plain' },
      body: 'verify only',
    });
    assert.equal(res.status, 202);
    assert.equal(res.headers.get('x-payment-response'), null);
    const { invocation_id: invocationId } = (await res.json()) as { invocation_id: string };
    const done = await waitForInvocation(other, agentId, invocationId);
    assert.equal(done.payment_amount, '4000');
    assert.equal(done.payment_payer, payer.address);
    assert.equal(await balanceOf(provider, payTo), 0n);
  });
});
