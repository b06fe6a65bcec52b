// Metered (upto) agents offered on every unpaid path (docs/API.md "Metered pricing"): each 402
// names the maximum and the tenant facilitator's address its /supported lists, read through the
// gateway's cache: a public agent's HTTP 402 (no token), the x402 MCP transport's payment-required
// tool result, the x402 A2A transport's payment-required task, and the discovery catalog beside
// an exact agent. A tenant whose facilitator cannot be read: its upto agent's challenge is a 503
// with Retry-After (fail closed), and the catalog still answers 200 with every other agent.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { getAddress } from 'ethers';
import { decodePaymentRequiredHeader, HTTPFacilitatorClient } from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { withBazaar } from '@x402/extensions/bazaar';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { closedPort } from '../support/proxy-helpers.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { newAccount, newPayTo, settlingTenant, type TestAccount } from '../support/x402.ts';

type Json = Record<string, any>;

const MAX = '50000';
const TOOL_MAX = '9000';
const METER = { kind: 'header', header: 'X-Usage-Cost' };
const uptoPricing = (payTo: string, extra: Json = {}) => ({
  amount: MAX,
  asset: 'USDC',
  network: 'base',
  pay_to: payTo,
  scheme: 'upto',
  meter: METER,
  ...extra,
});
const A2A_EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';

describe('metered (upto) agents on every unpaid path', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  let account: TestAccount;
  let token: string;
  // A replica whose unpaid and discovery buckets do not run dry (the stack's are shared by every test).
  let gateway: ExtraGateway;

  before(async () => {
    upstream = await startUpstream();
    account = await newAccount(`upto-challenges-${randomUUID()}`);
    token = await settlingTenant(`tenant-upto-challenges-${randomUUID()}`, account);
    const unpaid = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000 };
    gateway = await startCapturedGateway({
      publicAgents: { ...stack().config.publicAgents, ...unpaid },
      discovery: { rpsPerClient: 1000, rps: 1000, maxAgents: 10_000 },
    });
  });
  after(async () => {
    await gateway?.close();
    await upstream.close();
    await account.client.close();
  });

  async function publicAgent(json: Json, as = token): Promise<Json> {
    const created = await call('POST', '/v1/agents', {
      token: as,
      json: { name: uniqueName('upto'), upstream_url: upstream.url, public: true, ...json },
    });
    assert.equal(created.status, 201, created.text);
    return created.json;
  }
  /** A path of the agent's public URLs on the test's replica. */
  const publicPath = (url: string) => new URL(url).pathname;

  /** A single upto entry: the maximum, the pay-to and the facilitator's address. */
  function assertUptoAccepts(accepts: Json[], amount: string, payTo: string): void {
    assert.equal(accepts.length, 1, JSON.stringify(accepts));
    const [entry] = accepts;
    assert.equal(entry.scheme, 'upto');
    assert.equal(entry.amount, amount);
    assert.equal(getAddress(entry.payTo), getAddress(payTo));
    assert.equal(getAddress(String(entry.extra?.facilitatorAddress)), getAddress(stack().facilitator.gasWallet));
  }
  /** A v2 PaymentRequired whose one entry is upto. */
  const assertUptoEntry = (required: unknown, amount: string, payTo: string) =>
    assertUptoAccepts(PaymentRequiredV2Schema.parse(required).accepts, amount, payTo);

  it('a public http agent priced upto: the 402 (no token) offers upto with the facilitator address', async () => {
    const payTo = newPayTo();
    const agent = await publicAgent({ pricing: uptoPricing(payTo) });
    for (const [method, url] of [
      ['POST', agent.public_url],
      ['POST', agent.public_stream_url],
      ['GET', agent.public_url],
    ]) {
      const res = await callAt(gateway.url, method, publicPath(url), {
        ...(method === 'POST' ? { json: { q: 1 } } : { headers: { accept: 'application/json' } }),
      });
      assert.equal(res.status, 402, `${method} ${url}: ${res.text}`);
      assertUptoEntry(decodePaymentRequiredHeader(res.headers['payment-required'] as string), MAX, payTo);
      // The v1 body's entry says the same maximum and scheme.
      assert.equal(res.json.accepts[0].scheme, 'upto');
      assert.equal(res.json.accepts[0].maxAmountRequired, MAX);
    }
  });

  it("a public MCP agent priced upto per tool: the payment-required tool result offers the tool's maximum", async () => {
    const mcp = await startMcpServer();
    try {
      const payTo = newPayTo();
      const agent = await publicAgent({
        upstream_url: mcp.url,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        pricing: uptoPricing(payTo, { tools: { echo: TOOL_MAX } }),
      });
      const res = await callAt(gateway.url, 'POST', publicPath(agent.public_stream_url), {
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {} } }),
      });
      assert.equal(res.status, 200, res.text);
      const result = res.json.result as Json;
      assert.equal(result.isError, true, res.text);
      assertUptoEntry(result.structuredContent, TOOL_MAX, payTo);
    } finally {
      await mcp.close();
    }
  });

  it('a public A2A agent priced upto: the input-required task carries the upto PaymentRequired', async () => {
    const a2a: A2aUpstream = await startA2aServer();
    try {
      const payTo = newPayTo();
      const agent = await publicAgent({ upstream_url: a2a.url, protocol: 'a2a', pricing: uptoPricing(payTo) });
      const res = await callAt(gateway.url, 'POST', publicPath(agent.public_stream_url), {
        headers: { 'a2a-version': '1.0', 'x-a2a-extensions': A2A_EXTENSION },
        json: {
          jsonrpc: '2.0',
          id: 1,
          method: 'SendMessage',
          params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'unpaid' }] } },
        },
      });
      assert.equal(res.status, 200, res.text);
      const task = res.json.result.task as Json;
      assert.equal(task.status.state, 'TASK_STATE_INPUT_REQUIRED', res.text);
      const metadata = task.status.message.metadata as Json;
      assert.equal(metadata['x402.payment.status'], 'payment-required');
      assertUptoEntry(metadata['x402.payment.required'], MAX, payTo);
    } finally {
      await a2a.close();
    }
  });

  it('the discovery catalog lists a public upto agent beside an exact one', async () => {
    const payTo = newPayTo();
    await publicAgent({ pricing: uptoPricing(payTo), public_description: 'metered' });
    await publicAgent({
      pricing: { amount: '700', asset: 'USDC', network: 'base', pay_to: payTo },
      public_description: 'flat',
    });
    const bazaar = withBazaar(new HTTPFacilitatorClient({ url: gateway.url })).extensions.bazaar;
    const listed = await bazaar.listResources({ payTo });
    const byDescription = Object.fromEntries(listed.items.map((item) => [item.description, item.accepts]));
    assert.deepEqual(Object.keys(byDescription).sort(), ['flat', 'metered']);
    assert.equal(byDescription.flat[0].scheme, 'exact');
    assert.equal(byDescription.flat[0].amount, '700');
    assertUptoAccepts(byDescription.metered, MAX, payTo);
    // Filtered by scheme, as the Bazaar's filters say.
    const metered = await callAt(gateway.url, 'GET', `/discovery/resources?payTo=${payTo}&scheme=upto`);
    assert.equal(metered.status, 200, metered.text);
    assert.deepEqual(
      metered.json.items.map((item: Json) => item.description),
      ['metered'],
    );
  });

  it("a tenant whose facilitator cannot be read: its upto agent's challenge is a 503, the catalog still answers with the others", async () => {
    const broken = await newAccount(`upto-broken-${randomUUID()}`);
    try {
      const brokenToken = await settlingTenant(
        `tenant-upto-broken-${randomUUID()}`,
        broken,
        `https://127.0.0.1:${await closedPort()}`,
      );
      const payTo = newPayTo();
      const metered = await publicAgent({ pricing: uptoPricing(payTo), public_description: 'unreadable' }, brokenToken);
      await publicAgent(
        { pricing: { amount: '700', asset: 'USDC', network: 'base', pay_to: payTo }, public_description: 'flat' },
        brokenToken,
      );
      const challenge = await callAt(gateway.url, 'POST', publicPath(metered.public_url), { json: {} });
      assert.equal(challenge.status, 503, challenge.text);
      assert.ok(challenge.headers['retry-after'], 'told when to retry');

      const listed = await callAt(gateway.url, 'GET', `/discovery/resources?payTo=${payTo}`);
      assert.equal(listed.status, 200, listed.text);
      assert.deepEqual(
        listed.json.items.map((item: Json) => item.description),
        ['flat'],
      );
      // The other tenants' agents are still listed (an unfiltered page answers too).
      assert.equal((await callAt(gateway.url, 'GET', '/discovery/resources')).status, 200);
    } finally {
      await broken.client.close();
    }
  });
});
