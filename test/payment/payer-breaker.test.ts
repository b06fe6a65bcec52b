// A payer is never charged for a call the gateway already knows will fail: while the breaker of
// a tenant's upstream origin is open (opened by that tenant's free calls, on either endpoint, in
// this process or, with Redis, in another replica), a paid call to the same origin is refused
// with 503 and Retry-After before the payment stage. Nothing is settled, the payer keeps its
// money, and the same payment header pays once the upstream is back. And a 402 never carries a
// payment response, also when two identical paid calls race.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { JsonRpcProvider, Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { call, callAt, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { startProxyApp } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import {
  CHAIN_ID,
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  type TestAccount,
} from '../support/x402.ts';
import { createUpstreamClient } from '../../gateway/upstream/client.ts';
import {
  circuitKey,
  createMemoryCircuits,
  createOpenCircuits,
  type QueryRows,
} from '../../gateway/upstream/open-circuits.ts';
import { closeRedisClients } from '../../gateway/policy/redis.ts';
import { queryRows } from '../../gateway/db/orm.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';

// The run's own Redis (test/support/stack.ts), read once the stack is up.
const redisUrl = () => stack().redisUrl;
const PRICE = 4_000n;
const FUNDS = 100_000n;
/** The breaker opens on this many consecutive failures (gateway/upstream/breaker.ts). */
const OPENING_FAILURES = 5;
/**
 * How long the replicas' circuits stay open (the default is 10 s; the stack's own API and worker
 * keep 5 s, UPSTREAM_BREAKER_HALF_OPEN_MS in test/support/stack.ts):
 * long enough for the refusals asserted while open, short enough not to be waited out for long.
 */
const REPLICA_HALF_OPEN_MS = 4_000;

/** An upstream that answers 500 until `recover()`, and echoes from then on. */
async function flakyUpstream(): Promise<TestUpstream & { recover(): void }> {
  let down = true;
  const upstream = await startUpstream((req, res) => {
    res.statusCode = down ? 500 : 200;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(down ? { error: 'down' } : { echo: req.body.toString('utf8') }));
  });
  return { ...upstream, recover: () => (down = false) };
}

type Paid = { payer: Wallet; header: string; nonce: string };

describe('payer: an open breaker refuses a paid call before payment', function () {
  this.timeout(180_000);
  let provider: JsonRpcProvider;
  let account: TestAccount;
  let token: string;
  const tenant = `payer-breaker-${randomUUID()}`;

  before(async () => {
    provider = chainProvider();
    account = await newAccount(`breaker-${randomUUID()}`);
    token = await settlingTenant(tenant, account);
  });
  after(async () => {
    await account.client.close();
    provider.destroy();
    await closeRedisClients([redisUrl()]);
  });

  async function agent(upstreamUrl: string, payTo?: string): Promise<string> {
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName(payTo ? 'paid' : 'free'),
        upstream_url: upstreamUrl,
        ...(payTo ? { pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo } } : {}),
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id;
  }

  async function payment(payTo: string): Promise<Paid> {
    const payer = await newPayer(FUNDS);
    const signed = await signPayment(payer, { payTo, value: PRICE });
    return { payer, header: encodePayment(signed), nonce: signed.payload.authorization.nonce };
  }

  function send(base: string, agentId: string, path: '' | '/stream', xPayment?: string): Promise<Reply> {
    return callAt(base, 'POST', `/v1/proxy/${agentId}${path}`, {
      token,
      body: 'x',
      headers: { 'content-type': 'text/plain', ...(xPayment ? { 'x-payment': xPayment } : {}) },
    });
  }

  /** The free agent's calls fail until its (tenant, origin) breaker opens, through `base`'s streaming endpoint. */
  async function openByStreaming(base: string, freeAgent: string): Promise<void> {
    for (let i = 0; i < OPENING_FAILURES; i++) assert.equal((await send(base, freeAgent, '/stream')).status, 500);
    assert.equal((await send(base, freeAgent, '/stream')).status, 502, 'the circuit is open');
  }

  /** A refusal before payment: 503 with Retry-After, nothing collected, nothing settled. */
  async function assertRefusedUnpaid(res: Reply, paid: Paid, payTo: string, what: string): Promise<void> {
    assert.equal(res.status, 503, `${what}: ${res.status} ${res.text}`);
    assert.deepEqual(res.json, { error: 'upstream unavailable' }, what);
    const retryAfter = Number(res.headers['retry-after']);
    assert.ok(
      Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 10,
      `${what}: Retry-After ${retryAfter}`,
    );
    assert.equal(res.headers['x-payment-response'], undefined, what);
    assert.equal(res.headers['payment-response'], undefined, what);
    assert.equal(await balanceOf(provider, paid.payer.address), FUNDS, `${what}: the payer keeps its money`);
    assert.equal(await balanceOf(provider, payTo), 0n, `${what}: nothing collected`);
    const key = settlementKey(CHAIN_ID, stack().infra.tokenAddress, paid.payer.address, paid.nonce);
    assert.equal(await findSettlement(stack().facilitator.pool, key), null, `${what}: the facilitator never settled`);
  }

  /** The same header, resent while the circuit is still open (each refusal is free), until it is served. */
  async function payOnceRecovered(base: string, agentId: string, path: '' | '/stream', paid: Paid): Promise<Reply> {
    return waitFor(
      async () => {
        const res = await send(base, agentId, path, paid.header);
        return res.status !== 503 || res.json?.error !== 'upstream unavailable' ? res : null;
      },
      { timeoutMs: 60_000, everyMs: 250, what: 'the circuit to half-open' },
    );
  }

  function receiptOf(res: Reply): { success: boolean; transaction: string } {
    return JSON.parse(Buffer.from(String(res.headers['x-payment-response']), 'base64').toString('utf8'));
  }

  it('opened by the free agent’s streaming calls: both endpoints answer 503 unpaid, and the same header pays once the upstream is back', async () => {
    const upstream = await flakyUpstream();
    try {
      const freeAgent = await agent(upstream.url);
      const payTo = newPayTo();
      // Another path on the same origin: the breaker is the tenant's for the origin.
      const paidAgent = await agent(`${new URL(upstream.url).origin}/paid`, payTo);
      // Signed (and funded) before the circuit opens: its open time is for the refusals.
      const [streamed, queued] = [await payment(payTo), await payment(payTo)];
      await openByStreaming(stack().apiUrl, freeAgent);
      const reached = upstream.received.length;

      await assertRefusedUnpaid(
        await send(stack().apiUrl, paidAgent, '/stream', streamed.header),
        streamed,
        payTo,
        'stream',
      );
      await assertRefusedUnpaid(
        await send(stack().apiUrl, paidAgent, '', queued.header),
        queued,
        payTo,
        'transactional',
      );
      assert.equal(upstream.received.length, reached, 'no refused call reached the upstream');

      upstream.recover();
      const served = await payOnceRecovered(stack().apiUrl, paidAgent, '/stream', streamed);
      assert.equal(served.status, 200, served.text);
      assert.deepEqual(served.json, { echo: 'x' });
      assert.equal(receiptOf(served).success, true);
      const accepted = await payOnceRecovered(stack().apiUrl, paidAgent, '', queued);
      assert.equal(accepted.status, 202, accepted.text);
      assert.equal(receiptOf(accepted).success, true);
      const done = await waitForInvocation(token, paidAgent, accepted.json.invocation_id);
      assert.equal(done.status, 'succeeded', JSON.stringify(done));
      assert.equal(await balanceOf(provider, payTo), 2n * PRICE, 'each call paid once');
    } finally {
      await upstream.close();
    }
  });

  it('a free tool of a priced MCP agent is not refused for its open circuit: accepted and run like any free call', async () => {
    const upstream = await flakyUpstream();
    try {
      const freeAgent = await agent(upstream.url);
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('mcp-free-tool'),
          upstream_url: upstream.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          mcp_protocol_version: '2025-06-18',
          pricing: {
            amount: String(PRICE),
            asset: 'USDC',
            network: 'base',
            pay_to: newPayTo(),
            tools: { lookup: '0' },
          },
        },
      });
      assert.equal(created.status, 201, created.text);
      await openByStreaming(stack().apiUrl, freeAgent);
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'lookup' } });
      const accepted = await callAt(stack().apiUrl, 'POST', `/v1/proxy/${created.json.id}`, {
        token,
        body,
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(accepted.status, 202, accepted.text);
      // Accepted and run like any free call: the worker's breaker, or the still-failing upstream, answers it.
      const done = await waitForInvocation(token, created.json.id, accepted.json.invocation_id);
      assert.ok(['circuit_open', 'upstream_5xx'].includes(done.error_class), JSON.stringify(done));
      assert.equal(done.payment_amount, null);
    } finally {
      await upstream.close();
    }
  });

  it('opened by the worker’s transactional calls: the API refuses paid calls on both endpoints before payment', async () => {
    const upstream = await flakyUpstream();
    try {
      const freeAgent = await agent(upstream.url);
      const payTo = newPayTo();
      const paidAgent = await agent(upstream.url, payTo);
      // Signed (and funded) before the circuit opens: its open time is for the refusals.
      const refusedPaid = [await payment(payTo), await payment(payTo)];
      for (let i = 0; i < OPENING_FAILURES + 1; i++) {
        const accepted = await send(stack().apiUrl, freeAgent, '');
        assert.equal(accepted.status, 202, accepted.text);
        const done = await waitForInvocation(token, freeAgent, accepted.json.invocation_id);
        assert.equal(done.error_class, i < OPENING_FAILURES ? 'upstream_5xx' : 'circuit_open', JSON.stringify(done));
      }

      for (const [i, path] of (['', '/stream'] as const).entries()) {
        const paid = refusedPaid[i];
        await assertRefusedUnpaid(await send(stack().apiUrl, paidAgent, path, paid.header), paid, payTo, path || '/');
      }
      // Without a payment the answer is the same: nobody is asked to pay for such a call.
      assert.equal((await send(stack().apiUrl, paidAgent, '')).status, 503);

      upstream.recover();
      const paid = await payment(payTo);
      const accepted = await payOnceRecovered(stack().apiUrl, paidAgent, '', paid);
      assert.equal(accepted.status, 202, accepted.text);
      const done = await waitForInvocation(token, paidAgent, accepted.json.invocation_id);
      assert.equal(done.status, 'succeeded', JSON.stringify(done));
      assert.equal(await balanceOf(provider, payTo), PRICE);
    } finally {
      await upstream.close();
    }
  });

  // Two replicas as two processes would be: each its own breakers and memory, the shared store
  // (Redis, else the gateway's database) the only way one learns what the other's breaker knows.
  const sharedStores: Array<[string, () => { redisUrl?: string; query?: QueryRows }]> = [
    ['with Redis', () => ({ redisUrl: redisUrl() })],
    ['without Redis, through the database', () => ({ query: queryRows(stack().orm) })],
  ];
  for (const [store, shared] of sharedStores) {
    it(`${store}, a circuit one API replica opened refuses paid calls on another replica`, async () => {
      const replica = () =>
        startProxyApp(
          { redisUrl: shared().redisUrl },
          {
            upstream: createUpstreamClient({
              allow: stack().allow,
              circuits: createOpenCircuits({ ...shared(), local: createMemoryCircuits() }),
              breaker: { halfOpenAfterMs: REPLICA_HALF_OPEN_MS },
            }),
          },
        );
      const [a, b] = [await replica(), await replica()];
      const upstream = await flakyUpstream();
      try {
        const freeAgent = await agent(upstream.url);
        const payTo = newPayTo();
        const paidAgent = await agent(upstream.url, payTo);
        // Signed (and funded) before the circuit opens: its open time is for the refusals.
        const refusedPaid = [await payment(payTo), await payment(payTo)];
        const paid = await payment(payTo);
        await openByStreaming(a.url, freeAgent);
        // Replica a announces the opening to the shared store as it opens, without holding its
        // answer for it: b can learn of it once it is there (a reader of the store's own says so).
        const reader = createOpenCircuits({ ...shared(), local: createMemoryCircuits() });
        await waitFor(async () => (await reader.openFor(circuitKey(upstream.url, tenant))) > 0, {
          what: 'the opening in the shared store',
        });
        for (const [i, path] of (['', '/stream'] as const).entries()) {
          const res = await send(b.url, paidAgent, path, refusedPaid[i].header);
          await assertRefusedUnpaid(res, refusedPaid[i], payTo, `b ${path || '/'}`);
        }

        upstream.recover();
        const served = await payOnceRecovered(b.url, paidAgent, '/stream', paid);
        assert.equal(served.status, 200, served.text);
        assert.equal(await balanceOf(provider, payTo), PRICE);
      } finally {
        await upstream.close();
        await a.close();
        await b.close();
      }
    });
  }

  it('with Redis unreachable, the check fails open: a paid call to a healthy upstream is served', async () => {
    const broken = 'redis://127.0.0.1:1';
    const app = await startProxyApp(
      {},
      {
        upstream: createUpstreamClient({
          allow: stack().allow,
          circuits: createOpenCircuits({ redisUrl: broken, local: createMemoryCircuits() }),
        }),
      },
    );
    const upstream = await startUpstream();
    try {
      const payTo = newPayTo();
      const paidAgent = await agent(upstream.url, payTo);
      const served = await send(app.url, paidAgent, '/stream', (await payment(payTo)).header);
      assert.equal(served.status, 200, served.text);
      assert.equal(receiptOf(served).success, true);
    } finally {
      await upstream.close();
      await app.close();
      await closeRedisClients([broken]);
    }
  });

  it('two identical paid streaming calls at once: one is served with the receipt, the 402 carries none', async () => {
    const upstream = await startUpstream();
    try {
      const payTo = newPayTo();
      const paidAgent = await agent(upstream.url, payTo);
      const paid = await payment(payTo);
      const answers = await Promise.all([0, 1].map(() => send(stack().apiUrl, paidAgent, '/stream', paid.header)));
      const served = answers.filter((r) => r.status === 200);
      const refused = answers.filter((r) => r.status === 402);
      assert.equal(served.length, 1, answers.map((r) => `${r.status} ${r.text}`).join(', '));
      assert.equal(refused.length, 1, answers.map((r) => `${r.status} ${r.text}`).join(', '));
      assert.equal(receiptOf(served[0]).success, true);
      assert.deepEqual(refused[0].json, { error: 'payment already used' });
      assert.equal(refused[0].headers['x-payment-response'], undefined, 'no v1 receipt on a 402');
      assert.equal(refused[0].headers['payment-response'], undefined, 'no v2 receipt on a 402');
      assert.equal(await balanceOf(provider, payTo), PRICE, 'collected once');
    } finally {
      await upstream.close();
    }
  });
});
