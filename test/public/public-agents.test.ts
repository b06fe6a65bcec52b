// Public paid agents on the real stack (docs/API.md "Selling an agent to any x402 client"): a
// tenant opens a priced agent; unmodified x402 clients (x402-fetch 1.x, @x402/fetch 2.x) pay it
// with no token on both URLs; the payer, and only the payer, polls its call; the URLs close at
// once; unpaid challenges write nothing, reveal nothing and throttle no other tenant.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { getAddress } from 'ethers';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway } from '../support/catalog.ts';
import type { GatewayConfig } from '../../gateway/config.ts';
import type { TestUpstream } from '../support/upstream.ts';
import { withPayingTenant } from '../support/settling.ts';
import { payingFetch } from '../support/paying-client.ts';
import {
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  v2PayerClient,
} from '../support/x402.ts';

const SECRET = `upstream-secret-${randomUUID()}`;

/** An API instance of its own behind a trusted proxy, with these public-agent limits over the stack's. */
function limitedGateway(
  limits: Partial<GatewayConfig['publicAgents']>,
  publicAddress: GatewayConfig['publicAddress'] = { trustProxy: true },
) {
  return startCapturedGateway({ publicAddress, publicAgents: { ...stack().config.publicAgents, ...limits } });
}

/**
 * The rows a tenant has, in each table an anonymous caller could make the gateway write: the
 * tenant's own, so that another test's call still finishing in the background (a workflow
 * storing its answer's body) is not counted as the flood's.
 */
async function rowCounts(tenantId: string): Promise<Record<string, number>> {
  const conn = stack().orm.em.getConnection();
  const out: Record<string, number> = {};
  for (const table of ['invocations', 'bodies', 'payment_claims', 'policy_decisions']) {
    const [row] = await conn.execute<Array<{ n: string }>>(`select count(*) as n from ${table} where tenant_id = ?`, [
      tenantId,
    ]);
    out[table] = Number(row.n);
  }
  return out;
}

describe('public paid agents', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  let tenant: string;
  let token: string;
  withPayingTenant('public', (paying) => ({ upstream, tenant, token } = paying));

  async function publicAgent(extra: Record<string, unknown> = {}, as = token): Promise<any> {
    const credential = await call('POST', '/v1/credentials', {
      token: as,
      json: { name: uniqueName('cred'), auth_type: 'bearer', source: 'managed', plaintext: SECRET },
    });
    assert.equal(credential.status, 201, credential.text);
    const created = await call('POST', '/v1/agents', {
      token: as,
      json: {
        name: uniqueName('public'),
        upstream_url: upstream.url,
        credential_ref: credential.json.id,
        capture_body: true,
        pricing: { amount: '10000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
        public: true,
        public_description: 'Echoes <b>what</b> you send & more',
        ...extra,
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json;
  }

  it('makes only a priced agent of a settling tenant public, keeps it priced and its settlement configured', async () => {
    const unpriced = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName('free'), upstream_url: upstream.url, public: true },
    });
    assert.equal(unpriced.status, 400);
    assert.match(unpriced.json.error, /public agent must be priced/);

    const other = await stack().token(`tenant-unsettled-${randomUUID()}`);
    const unsettled = await call('POST', '/v1/agents', {
      token: other,
      json: {
        name: uniqueName('unsettled'),
        upstream_url: upstream.url,
        pricing: { amount: '10000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
        public: true,
      },
    });
    assert.equal(unsettled.status, 400);
    assert.match(unsettled.json.error, /settlement/);

    const agent = await publicAgent();
    assert.equal(agent.public, true);
    assert.equal(agent.public_url, `${stack().apiUrl}/public/agents/${agent.id}`);
    assert.equal(agent.public_stream_url, `${stack().apiUrl}/public/agents/${agent.id}/stream`);
    const unprice = await call('PATCH', `/v1/agents/${agent.id}`, { token, json: { pricing: null } });
    assert.equal(unprice.status, 400);
    assert.equal((await call('DELETE', '/v1/settlement/config', { token })).status, 409);
    const both = await call('PATCH', `/v1/agents/${agent.id}`, { token, json: { pricing: null, public: false } });
    assert.equal(both.status, 200, both.text);
    assert.equal(both.json.public_url, null);
  });

  for (const kind of ['x402-fetch', '@x402/fetch'] as const) {
    it(`${kind} pays a public agent with no token on both URLs; only the payer polls the call`, async () => {
      const agent = await publicAgent();
      const payer = await newPayer(1_000_000n);
      const { pay } = payingFetch(kind === 'x402-fetch' ? 'x402-fetch' : 'v2-only', payer);

      const marker = `public ${kind} ${randomUUID()}`;
      const res = await pay(agent.public_url, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: marker,
      });
      assert.equal(res.status, 202, await res.clone().text());
      const accepted = (await res.json()) as { invocation_id: string; poll_url: string };
      assert.match(accepted.poll_url, new RegExp(`/public/invocations/${accepted.invocation_id}\\?key=`));
      const poll = accepted.poll_url.slice(stack().apiUrl.length);
      const polled: any = await waitFor(
        async () => {
          const reply = await call('GET', poll);
          assert.equal(reply.status, 200, reply.text);
          return reply.json.status === 'succeeded' || reply.json.status === 'failed' ? reply : null;
        },
        { timeoutMs: 30_000, what: 'the call to complete' },
      );
      assert.equal(polled.json.status, 'succeeded');
      assert.equal(polled.json.caller_kind, 'x402');
      assert.equal(getAddress(polled.json.payment_payer), payer.address);
      assert.equal(Buffer.from(polled.json.response_body_b64, 'base64').toString().includes(marker), true);
      // Nobody else: no key, another key, the key for another id.
      const [path] = poll.split('?');
      assert.equal((await call('GET', path)).status, 404);
      assert.equal((await call('GET', `${path}?key=${'A'.repeat(22)}`)).status, 404);
      assert.equal((await call('GET', `/public/invocations/inv_${randomUUID()}?${poll.split('?')[1]}`)).status, 404);
      // The tenant sees the payer as the caller.
      const tenantView = await call('GET', `/v1/proxy/${agent.id}/invocations/${accepted.invocation_id}`, { token });
      assert.equal(tenantView.json.caller_kind, 'x402');
      const [row] = await stack()
        .orm.em.getConnection()
        .execute<Array<{ caller: string }>>('select caller from invocations where id = ?', [accepted.invocation_id]);
      assert.equal(row.caller, `x402:${payer.address}`);

      const streamed = await pay(agent.public_stream_url, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: `${marker} stream`,
      });
      assert.equal(streamed.status, 200, await streamed.clone().text());
      assert.ok((await streamed.text()).includes(`${marker} stream`));
      assert.ok(streamed.headers.get(kind === 'x402-fetch' ? 'x-payment-response' : 'payment-response'));
    });
  }

  it('closes the public URLs at once, on every replica, when the agent turns private, is suspended or deleted', async () => {
    // A second replica (own cache, own change feed), its unpaid-request limits out of the way.
    const replica = await startCapturedGateway({
      publicAgents: {
        challengeRpsPerClient: 1000,
        rpsPerClient: 1000,
        challengeRpsPerTenant: 1000,
        payerRps: 1000,
        pollRpsPerClient: 1000,
      },
    });
    const junk = Buffer.from('{}').toString('base64');
    const closed = async (id: string) => {
      for (const base of [stack().apiUrl, replica.url])
        for (const [method, path, headers] of [
          // On the stack's API with a payment header: paid requests are not limited per client.
          ['POST', `/public/agents/${id}`, { 'x-payment': junk }],
          ['POST', `/public/agents/${id}/stream`, { 'x-payment': junk }],
          ...(base === replica.url
            ? [
                ['POST', `/public/agents/${id}`, {}],
                ['POST', `/public/agents/${id}/stream`, {}],
                ['GET', `/public/agents/${id}`, { accept: 'text/html' }],
              ]
            : []),
        ] as Array<[string, string, Record<string, string>]>) {
          const res = await callAt(base, method, path, { body: 'x', headers });
          assert.equal(res.status, 404, `${method} ${path} ${JSON.stringify(headers)}`);
          assert.deepEqual(res.json, { error: 'not found' });
        }
    };
    try {
      await closed((await publicAgent({ public: false })).id);
      for (const change of [
        (id: string) => call('PATCH', `/v1/agents/${id}`, { token, json: { public: false } }),
        (id: string) => call('POST', `/v1/agents/${id}/suspend`, { token, json: {} }),
        (id: string) => call('DELETE', `/v1/agents/${id}`, { token }),
      ]) {
        const agent = await publicAgent();
        // Open, and in both replicas' caches.
        for (const base of [stack().apiUrl, replica.url])
          assert.equal(
            (await callAt(base, 'POST', `/public/agents/${agent.id}`, { body: 'x', headers: { 'x-payment': junk } }))
              .status,
            402,
          );
        const changed = await change(agent.id);
        assert.ok(changed.status < 300, changed.text);
        await closed(agent.id);
      }
    } finally {
      await replica.close();
    }
  });

  it('prices an MCP tool call by its tool before policy and writes nothing; a free tool is not served publicly', async () => {
    const payTo = newPayTo();
    const agent = await publicAgent({
      pricing: {
        amount: '1000',
        asset: 'USDC',
        network: 'base',
        pay_to: payTo,
        tools: { summarize: '7000', ping: '0' },
      },
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
    });
    const tool = (name: string) =>
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } });
    const before = await rowCounts(tenant);
    for (const path of [agent.public_url, agent.public_stream_url]) {
      const challenge = await call('POST', path.slice(stack().apiUrl.length), {
        body: tool('summarize'),
        headers: { 'content-type': 'application/json' },
      });
      // The x402 MCP transport's answer: a JSON-RPC tool result telling the client what to pay.
      assert.equal(challenge.status, 200, challenge.text);
      assert.equal(challenge.json.result.isError, true);
      assert.equal(challenge.json.result.structuredContent.accepts[0].amount, '7000');
      const free = await call('POST', path.slice(stack().apiUrl.length), {
        body: tool('ping'),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(free.status, 403, free.text);
    }
    assert.deepEqual(await rowCounts(tenant), before, 'no row written');
  });

  it('a payer resending under its payment identifier gets the first call back with a new poll URL', async () => {
    const agent = await publicAgent();
    const path = agent.public_url.slice(stack().apiUrl.length);
    const challenge = await call('POST', path, { body: 'challenge' });
    assert.equal(challenge.status, 402, challenge.text);
    const required = decodePaymentRequiredHeader(challenge.headers['payment-required'] as string);
    const payload = await v2PayerClient(await newPayer(1_000_000n)).createPaymentPayload(required);
    payload.extensions = appendPaymentIdentifierToExtensions(payload.extensions ?? {}, generatePaymentId());
    const headers = { 'payment-signature': encodePaymentSignatureHeader(payload), 'content-type': 'text/plain' };
    const marker = `resent ${randomUUID()}`;
    const first = await call('POST', path, { body: marker, headers });
    assert.equal(first.status, 202, first.text);
    const again = await call('POST', path, { body: marker, headers });
    assert.equal(again.status, 202, again.text);
    assert.equal(again.json.invocation_id, first.json.invocation_id, 'the same call, not a second charge');
    assert.notEqual(again.json.poll_url, first.json.poll_url);
    // The new key replaces the old one.
    assert.equal((await call('GET', first.json.poll_url.slice(stack().apiUrl.length))).status, 404);
    const polled = await call('GET', again.json.poll_url.slice(stack().apiUrl.length));
    assert.equal(polled.status, 200, polled.text);
    assert.equal(polled.json.invocation_id, first.json.invocation_id);
    assert.equal(upstream.received.filter((r) => r.body.toString() === marker).length <= 1, true);
  });

  it('answers a challenge and a browser page with nothing of the upstream, credential or tenant; /v1 still needs a token', async () => {
    const agent = await publicAgent();
    const challenge = await call('POST', `/public/agents/${agent.id}`, { body: 'x' });
    assert.equal(challenge.status, 402);
    assert.equal(challenge.json.accepts[0].resource, agent.public_url);
    assert.ok(challenge.headers['payment-required']);
    const page = await call('GET', `/public/agents/${agent.id}`, { headers: { accept: 'text/html' } });
    assert.equal(page.status, 200);
    assert.match(String(page.headers['content-type']), /text\/html/);
    assert.match(String(page.headers['content-security-policy']), /default-src 'none'/);
    assert.ok(page.text.includes('Echoes &lt;b&gt;what&lt;/b&gt; you send &amp; more'));
    assert.ok(!page.text.includes('<b>') && !page.text.includes('<script'));
    assert.ok(page.text.includes('0.01 USDC'));
    // The answer varies by Accept and is no one's to cache: nor is a poll's.
    const poll = await call('GET', `/public/invocations/inv_${randomUUID()}?key=${'a'.repeat(22)}`);
    assert.equal(poll.status, 404);
    for (const reply of [challenge, page, poll]) {
      assert.equal(reply.headers.vary, 'Accept');
      assert.equal(reply.headers['cache-control'], 'no-store');
    }
    for (const reply of [challenge, page]) {
      const seen =
        JSON.stringify(reply.headers) +
        reply.text +
        Buffer.from(String(reply.headers['payment-required']), 'base64').toString();
      for (const secret of [SECRET, upstream.url, new URL(upstream.url).host, tenant, agent.credential_ref])
        assert.ok(!seen.includes(secret), `nothing of ${secret}`);
    }
    assert.equal((await call('POST', `/v1/proxy/${agent.id}`, { body: 'x' })).status, 401);
  });

  it('a challenge flood writes nothing, reaches no upstream and throttles no other tenant', async () => {
    const agent = await publicAgent();
    const otherToken = await stack().token(`tenant-other-${randomUUID()}`);
    const otherAgent = await call('POST', '/v1/agents', {
      token: otherToken,
      json: { name: uniqueName('other'), upstream_url: upstream.url },
    });
    // One client address no other test draws from, behind a trusted proxy, on a replica whose
    // tenant bucket is out of the way: its bucket starts full however fast the tests before ran.
    const gateway = await limitedGateway({ challengeRpsPerClient: 5, challengeRpsPerTenant: 1000 });
    const client = `203.0.113.${200 + Math.floor(Math.random() * 50)}`;
    try {
      const before = await rowCounts(tenant);
      const reached = upstream.received.length;
      const answers = await Promise.all(
        Array.from({ length: 60 }, () =>
          callAt(gateway.url, 'POST', `/public/agents/${agent.id}`, {
            body: 'flood',
            headers: { 'x-forwarded-for': client },
          }),
        ),
      );
      const statuses = new Set(answers.map((a) => a.status));
      assert.ok(statuses.has(402) && statuses.has(429), [...statuses].join(','));
      assert.deepEqual(await rowCounts(tenant), before, 'no row written');
      assert.equal(upstream.received.length, reached, 'no upstream call');
    } finally {
      await gateway.close();
    }
    // Another tenant's calls are not throttled.
    const other = await call('POST', `/v1/proxy/${otherAgent.json.id}`, { token: otherToken, body: 'mine' });
    assert.equal(other.status, 202, other.text);
  });

  it('behind a trusted proxy: challenges are limited per client address and per tenant, never across tenants', async () => {
    const gateway = await limitedGateway(
      { challengeRpsPerClient: 1, challengeRpsPerTenant: 3 },
      { url: 'https://gateway.example/base', trustProxy: true },
    );
    try {
      const agent = await publicAgent();
      const read = await callAt(gateway.url, 'GET', `/v1/agents/${agent.id}`, { token });
      assert.equal(read.json.public_url, `https://gateway.example/base/public/agents/${agent.id}`);
      const otherAccount = await newAccount(`public-other-${randomUUID()}`);
      const otherToken = await settlingTenant(`tenant-public-other-${randomUUID()}`, otherAccount);
      const other = await publicAgent({}, otherToken);
      await otherAccount.client.close();
      const challenge = (id: string, client: string) =>
        callAt(gateway.url, 'POST', `/public/agents/${id}`, { body: 'x', headers: { 'x-forwarded-for': client } });

      // One client: its own bucket (1/s, 2 deep) refuses it; another client is still answered.
      const one = await Promise.all(Array.from({ length: 6 }, () => challenge(agent.id, '203.0.113.1')));
      assert.deepEqual(new Set(one.map((r) => r.status)), new Set([402, 429]));
      assert.equal((await challenge(agent.id, '203.0.113.2')).status, 402);
      // Many clients at one tenant: its bucket (3/s, 6 deep) refuses them; the other tenant's is untouched.
      const many = await Promise.all(Array.from({ length: 20 }, (_, i) => challenge(agent.id, `203.0.113.${10 + i}`)));
      assert.ok(many.some((r) => r.status === 429));
      for (const client of ['203.0.113.100', '203.0.113.101', '203.0.113.102'])
        assert.equal((await challenge(other.id, client)).status, 402);
    } finally {
      await gateway.close();
    }
  });

  it('a flood of made-up payments is limited like challenges and writes nothing', async () => {
    // Its own client address behind a trusted proxy: a bucket no other test has drawn from.
    const gateway = await limitedGateway({ challengeRpsPerClient: 1, challengeRpsPerTenant: 1000 });
    try {
      const agent = await publicAgent();
      const before = await rowCounts(tenant);
      const junk = Buffer.from(
        JSON.stringify({ x402Version: 1, scheme: 'exact', network: 'base', payload: {} }),
      ).toString('base64');
      const client = `192.0.2.${Math.floor(Math.random() * 250) + 1}`;
      const answers = await Promise.all(
        Array.from({ length: 20 }, () =>
          callAt(gateway.url, 'POST', `/public/agents/${agent.id}`, {
            body: 'junk',
            headers: { 'x-payment': junk, 'x-forwarded-for': client },
          }),
        ),
      );
      const statuses = new Set(answers.map((a) => a.status));
      assert.ok(statuses.has(402) && statuses.has(429), [...statuses].join(','));
      assert.deepEqual(await rowCounts(tenant), before, 'no row written');
    } finally {
      await gateway.close();
    }
  });
  it('a flood of requests with any payment header is limited per client before the agent is read, and costs its tenant nothing', async () => {
    const gateway = await limitedGateway({ challengeRpsPerClient: 1000, rpsPerClient: 1, challengeRpsPerTenant: 1000 });
    try {
      // The agent's own bucket holds one call: a flood that took from it would refuse the tenant's.
      const agent = await publicAgent({ rate_limit_rps: 0.01, rate_limit_burst: 1 });
      const client = `198.18.0.${Math.floor(Math.random() * 250) + 1}`;
      // A junk payment is refused before its body is read: the 402 comes while the body is still
      // on its way, and meanwhile the agent's bucket is whole for its tenant's own call.
      const slow = request(`${gateway.url}/public/agents/${agent.id}`, {
        method: 'POST',
        headers: { 'x-payment': 'x', 'x-forwarded-for': `198.18.3.${Math.floor(Math.random() * 250) + 1}` },
      });
      slow.setHeader('content-length', 2048);
      const answered = new Promise<number>((resolve, reject) => {
        slow.once('response', (res) => resolve(res.statusCode ?? 0));
        slow.once('error', reject);
      });
      slow.write('x'.repeat(1024));
      try {
        assert.equal(await answered, 402);
        const own = await callAt(gateway.url, 'POST', `/v1/proxy/${agent.id}`, { token, body: 'mine' });
        // Past the rate limit to the payment stage (the agent is priced): not 429.
        assert.equal(own.status, 402, own.text);
      } finally {
        slow.destroy();
      }
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          callAt(gateway.url, 'POST', `/public/agents/${agent.id}`, {
            body: 'x'.repeat(1024),
            headers: { 'x-payment': 'x', 'x-forwarded-for': client },
          }),
        ),
      );
      const statuses = new Set(answers.map((a) => a.status));
      assert.ok(statuses.has(429) && !statuses.has(202), [...statuses].join(','));
      // Unknown ids too: refused by the client's bucket, not read.
      const scan = await callAt(gateway.url, 'POST', `/public/agents/agt_${randomUUID().replace(/-/g, '')}`, {
        body: 'x',
        headers: { 'x-payment': 'x', 'x-forwarded-for': client },
      });
      assert.equal(scan.status, 429);
    } finally {
      await gateway.close();
    }
  });

  it("an MCP call paid in _meta takes the agent's bucket like a call paid in a header", async () => {
    const gateway = await startCapturedGateway({ publicAddress: { trustProxy: true } });
    try {
      const agent = await publicAgent({
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        rate_limit_rps: 0.01,
        rate_limit_burst: 1,
      });
      const client = `198.18.1.${Math.floor(Math.random() * 250) + 1}`;
      const request = (meta?: Record<string, unknown>) =>
        callAt(gateway.url, 'POST', `/public/agents/${agent.id}`, {
          headers: { 'content-type': 'application/json', 'x-forwarded-for': client },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'echo', arguments: {}, ...(meta ? { _meta: meta } : {}) },
          }),
        });
      const unpaid = await request();
      assert.equal(unpaid.status, 200, unpaid.text);
      const required = unpaid.json.result.structuredContent;
      const payer = v2PayerClient(await newPayer(1_000_000n));
      const first = await request({ 'x402/payment': await payer.createPaymentPayload(required) });
      assert.equal(first.status, 202, first.text);
      const second = await request({ 'x402/payment': await payer.createPaymentPayload(required) });
      assert.equal(second.status, 429, second.text);
    } finally {
      await gateway.close();
    }
  });
  it('signed authorizations from an unfunded key are limited per client like challenges until one settles', async () => {
    const gateway = await limitedGateway({
      challengeRpsPerClient: 0.01,
      rpsPerClient: 1000,
      challengeRpsPerTenant: 1000,
      payerRps: 1000,
    });
    try {
      const agent = await publicAgent();
      const unfunded = await newPayer(0n);
      const client = `198.18.2.${Math.floor(Math.random() * 250) + 1}`;
      // Each verifies, is claimed and refused at settlement: its client's challenge token stays taken.
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) {
        const payment = await signPayment(unfunded, { payTo: agent.pricing.pay_to, value: agent.pricing.amount });
        const res = await callAt(gateway.url, 'POST', `/public/agents/${agent.id}`, {
          body: 'x',
          headers: { 'x-payment': encodePayment(payment), 'x-forwarded-for': client },
        });
        statuses.push(res.status);
      }
      // The bucket holds one token (0.01/s, at least 1 deep).
      assert.deepEqual(statuses, [402, 429, 429]);
    } finally {
      await gateway.close();
    }
  });
});
