// Budgets and money, on the real stack and chain (docs/API.md "Budgets"): a hard `amount` budget
// on a priced agent refuses the payer that would take it past its limit before anything is
// verified, bound or settled (its balance on chain does not move; an unmodified x402 client is
// not even asked to sign); an `upto` call reserves its maximum while it runs and gives back all
// but its charge once the charge settles; a paid call whose payment is released (it never reached
// its upstream) gives its amount back, and the same header then buys the call, counted once.
// A gateway whose Redis cannot be reached refuses a call matching a hard budget with 503 and
// Retry-After before anything is settled (a hard cap is not taken on trust), and passes one
// matching only a soft budget.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { JsonRpcProvider, Wallet } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { withPayingTenant } from '../support/settling.ts';
import { balanceOf, CHAIN_ID, encodePayment, newPayer, newPayTo, signPayment, transfersTo } from '../support/x402.ts';
import { payingFetch } from '../support/paying-client.ts';
import { rpcReader, settledInvocation, uptoPayer } from '../support/upto.ts';
import { waitFor } from '../support/wait.ts';
import type { TestUpstream } from '../support/upstream.ts';
import { startGateway } from '../../api/wiring.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import { createLogger } from '../../lib/log.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

const PRICE = 10_000n;
const MAX = 50_000n;

describe('budgets: refused before anyone pays, trued up to the charge', function () {
  this.timeout(120_000);
  let token: string;
  let provider: JsonRpcProvider;
  let upstream: TestUpstream;
  withPayingTenant('budgets', (paying) => {
    token = paying.token;
    provider = paying.provider;
    upstream = paying.upstream;
  });

  async function agent(pricing: Record<string, unknown>, upstreamUrl = upstream.url): Promise<string> {
    const res = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('budgeted'),
        upstream_url: upstreamUrl,
        pricing: { asset: 'USDC', network: 'base', ...pricing },
      },
    });
    assert.equal(res.status, 201, res.text);
    return res.json.id as string;
  }

  async function budget(agentId: string, amount: bigint, base = stack().apiUrl) {
    const res = await callAt(base, 'POST', '/v1/budgets', {
      token,
      json: {
        name: uniqueName('spend'),
        scope: { agent_id: agentId },
        limit: { amount: String(amount) },
        window: 'day',
        mode: 'hard',
      },
    });
    assert.equal(res.status, 201, res.text);
    return res.json as { id: string };
  }

  const usedOf = async (id: string, base = stack().apiUrl) =>
    (await callAt(base, 'GET', `/v1/budgets/${id}`, { token })).json.used as { amount: string; calls: number };

  const refusedBy = (res: Reply, budgetId: string) => {
    assert.equal(res.status, 429, res.text);
    assert.deepEqual(res.json, { error: 'budget exceeded', budget_id: budgetId });
  };

  it("an amount budget refuses the payer past it: the refused payer's balance does not move", async () => {
    const payTo = newPayTo();
    const agentId = await agent({ amount: String(PRICE), pay_to: payTo });
    const { id } = await budget(agentId, PRICE);
    const paid = async (payer: Wallet) =>
      call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: 'x',
        headers: {
          'content-type': 'text/plain',
          'x-payment': encodePayment(await signPayment(payer, { payTo, value: PRICE })),
        },
      });
    const first = await newPayer(100_000n);
    const accepted = await paid(first);
    assert.equal(accepted.status, 202, accepted.text);
    await waitForInvocation(token, agentId, accepted.json.invocation_id);

    const second = await newPayer(100_000n);
    refusedBy(await paid(second), id);
    // An unmodified x402 client is refused before any challenge: it never signs.
    const client = payingFetch('default', second);
    const res = await client.pay(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: 'x',
    });
    assert.equal(res.status, 429);
    assert.equal(((await res.json()) as { budget_id: string }).budget_id, id);
    assert.deepEqual(
      client.sent.map((s) => [s.xPayment, s.signature]),
      [[null, null]],
      'one request, no payment signed',
    );

    assert.equal(await balanceOf(provider, second.address), 100_000n, "the refused payer's balance did not move");
    assert.equal(await balanceOf(provider, first.address), 100_000n - PRICE);
    assert.deepEqual(
      (await transfersTo(provider, payTo)).map((t) => t.value),
      [PRICE],
      'one transfer: the admitted call',
    );
    assert.deepEqual(await usedOf(id), { amount: String(PRICE), calls: 1 });
  });

  it('a payer-scoped budget caps what one payer buys from a public agent; another payer is not counted', async () => {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('public-budgeted'),
        upstream_url: upstream.url,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
        public: true,
      },
    });
    assert.equal(created.status, 201, created.text);
    const capped = await newPayer(100_000n);
    const budget = await call('POST', '/v1/budgets', {
      token,
      json: {
        name: uniqueName('per-payer'),
        scope: { payer: capped.address.toLowerCase() },
        limit: { amount: String(PRICE) },
        window: 'hour',
        mode: 'hard',
      },
    });
    assert.equal(budget.status, 201, budget.text);
    const buy = (payer: Wallet) =>
      payingFetch('v2-only', payer).pay(created.json.public_stream_url as string, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: 'x',
      });
    const first = await buy(capped);
    assert.equal(first.status, 200, await first.clone().text());
    await first.arrayBuffer();
    const second = await buy(capped);
    assert.equal(second.status, 429);
    assert.deepEqual(await second.json(), { error: 'budget exceeded', budget_id: budget.json.id });
    assert.ok(Number(second.headers.get('retry-after')) <= 3600);
    assert.equal(await balanceOf(provider, capped.address), 100_000n - PRICE, 'charged for the first call only');
    const other = await newPayer(100_000n);
    const elsewhere = await buy(other);
    assert.equal(elsewhere.status, 200, 'another payer is out of the scope');
    await elsewhere.arrayBuffer();
    await waitFor(async () => (await usedOf(budget.json.id as string)).amount === String(PRICE), { what: 'the usage' });
  });

  it('an upto call reserves its maximum while it runs and frees all but its charge once it settles', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const { startUpstream } = await import('../support/upstream.ts');
    const slow = await startUpstream(async (_req, res) => {
      await held;
      res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': '1234' });
      res.end('{"ok":true}');
    });
    try {
      const agentId = await agent(
        { scheme: 'upto', amount: String(MAX), pay_to: newPayTo(), meter: { kind: 'header', header: 'X-Usage-Cost' } },
        slow.url,
      );
      const { id } = await budget(agentId, MAX + MAX / 2n);
      const uptoFetch = (payer: Wallet) => {
        const signer = toClientEvmSigner(
          privateKeyToAccount(payer.privateKey as `0x${string}`),
          rpcReader(stack().infra.chainRpcUrl) as Parameters<typeof toClientEvmSigner>[1],
        );
        const client = new x402Client().register('eip155:*', new UptoEvmScheme(signer));
        client.setSpendControls({
          allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }],
        });
        return wrapFetchWithPayment(fetch, client);
      };
      const streamed = (payer: Wallet) =>
        uptoFetch(payer)(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: '{}',
        });
      const payer = await uptoPayer(provider, 1_000_000n);
      const running = streamed(payer);
      await waitFor(async () => (await usedOf(id)).amount === String(MAX), { what: 'the maximum reserved' });
      // Another maximum does not fit beside it: refused before the challenge.
      const other = await uptoPayer(provider, 1_000_000n);
      const refused = await streamed(other);
      assert.equal(refused.status, 429);
      assert.equal(((await refused.json()) as { budget_id: string }).budget_id, id);

      release();
      const answer = await running;
      assert.equal(answer.status, 200);
      await answer.arrayBuffer();
      const invocationId = answer.headers.get('x-gateway-invocation-id')!;
      const settled = await settledInvocation(token, agentId, invocationId);
      assert.equal(settled.payment_charge, '1234');
      await waitFor(async () => (await usedOf(id)).amount === '1234', {
        timeoutMs: 15_000,
        what: 'the reservation trued up to the charge',
      });
      assert.equal((await usedOf(id)).calls, 1);
      const next = await streamed(other);
      assert.equal(next.status, 200, 'the freed rest admits another call');
      await next.arrayBuffer();
    } finally {
      release();
      await slow.close();
    }
  });

  it('a released payment gives its amount back; the same header then buys the call, counted once', async () => {
    const payTo = newPayTo();
    const agentId = await agent({ amount: String(PRICE), pay_to: payTo });
    // A gateway whose calls wait on a task queue no worker polls until this test starts one.
    const taskQueue = `budget-release-${randomUUID()}`;
    const config: GatewayConfig = { ...stack().config, port: 0, temporal: { ...stack().config.temporal, taskQueue } };
    const server: Server = await startGateway(config, stack().orm, stack().temporal, createLogger('api', 'silent'));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const { id } = await budget(agentId, PRICE, base);
      const payer = await newPayer(100_000n);
      const header = encodePayment(
        await signPayment(payer, { payTo, value: PRICE, validBefore: Math.floor(Date.now() / 1000) + 600 }),
      );
      const send = () =>
        callAt(base, 'POST', `/v1/proxy/${agentId}`, {
          token,
          body: 'x',
          headers: { 'content-type': 'text/plain', 'x-payment': header },
        });
      const accepted = await send();
      assert.equal(accepted.status, 202, accepted.text);
      assert.deepEqual(await usedOf(id, base), { amount: String(PRICE), calls: 1 });
      // The agent loses its upstream before the call runs: it fails before any attempt, its payment released.
      assert.equal((await call('PATCH', `/v1/agents/${agentId}`, { token, json: { upstream_url: null } })).status, 200);
      const { worker, connection } = await createGatewayWorker(config, stack().orm, {
        workflowBundle: stack().workflowBundle,
      });
      const running = worker.run();
      try {
        const failed = await waitForInvocation(token, agentId, accepted.json.invocation_id as string);
        assert.equal(failed.status, 'failed');
        await waitFor(async () => (await usedOf(id, base)).calls === 0, { what: 'the released payment given back' });
        assert.deepEqual(await usedOf(id, base), { amount: '0', calls: 0 });

        assert.equal(
          (await call('PATCH', `/v1/agents/${agentId}`, { token, json: { upstream_url: upstream.url } })).status,
          200,
        );
        const resumed = await send();
        assert.equal(resumed.status, 202, resumed.text);
        await waitForInvocation(token, agentId, resumed.json.invocation_id as string);
        await waitFor(async () => (await usedOf(id, base)).calls === 1, { what: 'the resumed call counted' });
        assert.deepEqual(await usedOf(id, base), { amount: String(PRICE), calls: 1 });
        assert.deepEqual(
          (await transfersTo(provider, payTo)).map((t) => t.value),
          [PRICE],
          'charged once',
        );
      } finally {
        worker.shutdown();
        await running;
        await connection.close();
      }
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
  it('answers 503 with Retry-After when its Redis cannot be asked about a hard budget, and charges nothing', async () => {
    const payTo = newPayTo();
    const agentId = await agent({ amount: String(PRICE), pay_to: payTo });
    const softAgentId = await agent({ amount: String(PRICE), pay_to: payTo });
    await budget(agentId, PRICE * 10n);
    const soft = await call('POST', '/v1/budgets', {
      token,
      json: {
        name: uniqueName('soft'),
        scope: { agent_id: softAgentId },
        limit: { amount: String(PRICE * 10n) },
        window: 'day',
        mode: 'soft',
      },
    });
    assert.equal(soft.status, 201, soft.text);
    // A gateway whose REDIS_URL names a port nothing listens on (its limiter fails open; its ledger cannot answer).
    const config: GatewayConfig = { ...stack().config, port: 0, redisUrl: `redis://127.0.0.1:${await freePort()}` };
    const server: Server = await startGateway(config, stack().orm, stack().temporal, createLogger('api', 'silent'));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const payer = await newPayer(100_000n);
      const paid = async (id: string) =>
        callAt(base, 'POST', `/v1/proxy/${id}`, {
          token,
          body: 'x',
          headers: {
            'content-type': 'text/plain',
            'x-payment': encodePayment(await signPayment(payer, { payTo, value: PRICE })),
          },
        });
      const before = upstream.received.length;
      const refused = await paid(agentId);
      assert.equal(refused.status, 503, refused.text);
      assert.equal(refused.headers['retry-after'], '1');
      assert.deepEqual(refused.json, { error: 'budgets cannot be checked now; retry later' });
      assert.equal(upstream.received.length, before, 'never forwarded');
      assert.equal(await balanceOf(provider, payer.address), 100_000n, 'nothing charged');
      assert.deepEqual(await transfersTo(provider, payTo), []);
      // No invocation was recorded for it: the call never started.
      const listed = await callAt(base, 'GET', `/v1/invocations?agent_id=${agentId}`, { token });
      assert.equal(listed.status, 200, listed.text);
      assert.deepEqual(listed.json.data, []);

      // A soft budget is not a cap: its call passes, paid.
      const passed = await paid(softAgentId);
      assert.equal(passed.status, 202, passed.text);
      await waitForInvocation(token, softAgentId, passed.json.invocation_id as string);
      assert.equal(await balanceOf(provider, payer.address), 100_000n - PRICE);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
