// The invoke fast path (api/invoke/fast-path.ts) runs every stage of the gate. The calls below go to an app
// made of the lean handler alone, with a tripwire behind it: a request that reached the general
// stack would be answered 599, so every answer here is the lean path's own. Each stage is shown
// on both invoke endpoints: authentication, admission (404, 422, 400), the agent's and the
// tenant's buckets, policy, payment, the row and the receipt, the header rules both ways and the
// SSRF guard. The API's own app (stack().apiUrl) then shows what the lean path leaves to the
// general stack: another method is 405 with Allow, another path 404, and a path the lean handler
// does not recognise (a trailing slash) is served by the router just the same.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call, callAt } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { createAgent, proxyAppDeps, waitForRow } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { createProxyParts, type ProxyParts } from '../../api/proxy/pipeline-parts.ts';
import { invokeFastPath } from '../../api/invoke/fast-path.ts';
import { createVerifier } from '../../api/auth.ts';
import { observeRequests } from '../../lib/observability/http.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

const TRIPWIRE = 599;

/** The lean handler alone, then a tripwire: nothing may reach the general stack. */
async function startLeanOnly(configPatch: Partial<GatewayConfig> = {}) {
  const deps = proxyAppDeps(configPatch);
  const services: ProxyParts = createProxyParts(deps);
  const app = new Koa();
  app.silent = true;
  app.use(
    invokeFastPath(deps, services, {
      verify: createVerifier(deps.config.auth),
      observe: observeRequests('test', deps.log),
    }),
  );
  app.use((ctx) => {
    ctx.status = TRIPWIRE;
  });
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await services.limiter.close();
      await services.upstream.close();
    },
  };
}

const ENDPOINTS = [
  { name: 'transactional', suffix: '', ok: 202 },
  { name: 'streaming', suffix: '/stream', ok: 200 },
] as const;

describe('the lean path runs every stage of the gate', function () {
  this.timeout(60_000);
  let upstream: TestUpstream;
  let lean: Awaited<ReturnType<typeof startLeanOnly>>;
  let token: string;
  before(async () => {
    upstream = await startUpstream((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.setHeader('set-cookie', 'session=upstream');
      res.setHeader('x-upstream', 'kept');
      res.end(JSON.stringify({ echo: req.body.toString('utf8') }));
    });
    lean = await startLeanOnly();
    token = await stack().token(`tenant-lean-${randomUUID()}`);
  });
  after(async () => {
    await lean.close();
    await upstream.close();
  });

  const invoke = (base: string, agentId: string, suffix: string, opts: Parameters<typeof callAt>[3] = {}) =>
    callAt(base, 'POST', `/v1/proxy/${agentId}${suffix}`, { token, body: 'hello', ...opts });

  for (const { name, suffix, ok } of ENDPOINTS) {
    describe(name, () => {
      it('authenticates: no token or a bad one is 401 with no body', async () => {
        const agentId = await createAgent(token, { upstream_url: upstream.url });
        for (const auth of [undefined, 'Bearer not-a-token']) {
          const res = await callAt(lean.url, 'POST', `/v1/proxy/${agentId}${suffix}`, {
            body: 'x',
            headers: auth ? { authorization: auth } : {},
          });
          assert.equal(res.status, 401);
          assert.equal(res.text, '');
        }
      });

      it('admits: an unknown agent is 404, one that is not invocable 422, an oversized model header 400', async () => {
        assert.equal((await invoke(lean.url, 'agt_01890000-0000-7000-8000-000000000000', suffix)).status, 404);
        const pending = await createAgent(token, {});
        assert.equal((await invoke(lean.url, pending, suffix)).status, 422);
        const agentId = await createAgent(token, { upstream_url: upstream.url });
        const model = await invoke(lean.url, agentId, suffix, { headers: { 'x-gateway-model': 'm'.repeat(257) } });
        assert.equal(model.status, 400);
      });

      it("takes the agent's bucket: past its burst, 429 with Retry-After", async () => {
        const agentId = await createAgent(token, {
          upstream_url: upstream.url,
          rate_limit_rps: 0.01,
          rate_limit_burst: 1,
        });
        assert.equal((await invoke(lean.url, agentId, suffix)).status, ok);
        const refused = await invoke(lean.url, agentId, suffix);
        assert.equal(refused.status, 429);
        assert.match(String(refused.headers['retry-after']), /^\d+$/);
      });

      it('applies the tenant policy: a denied call is 403 and never forwarded', async () => {
        const own = await stack().token(`tenant-lean-policy-${randomUUID()}`);
        const agentId = await createAgent(own, { upstream_url: upstream.url });
        const marker = `denied ${randomUUID()}`;
        const put = await call('PUT', '/v1/policy', {
          token: own,
          json: { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { agents: [agentId] } }] },
        });
        assert.ok(put.status < 300, put.text);
        const res = await callAt(lean.url, 'POST', `/v1/proxy/${agentId}${suffix}`, { token: own, body: marker });
        assert.equal(res.status, 403);
        assert.deepEqual(res.json, { error: 'denied by policy' });
        assert.ok(!upstream.received.some((r) => r.body.toString() === marker));
      });

      it('asks a priced agent for payment: 402 with the requirements, nothing forwarded', async () => {
        const priced = await call('POST', '/v1/agents', {
          token,
          json: {
            name: `lean-priced-${randomUUID()}`,
            upstream_url: upstream.url,
            pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: `0x${'7'.repeat(40)}` },
          },
        });
        assert.equal(priced.status, 201, priced.text);
        const marker = `unpaid ${randomUUID()}`;
        const res = await invoke(lean.url, priced.json.id, suffix, { body: marker });
        assert.equal(res.status, 402);
        assert.equal(res.json.accepts[0].maxAmountRequired, '1000');
        assert.ok(!upstream.received.some((r) => r.body.toString() === marker));
      });

      it('records the call and signs its receipt, and keeps the header rules both ways', async () => {
        const agentId = await createAgent(token, { upstream_url: upstream.url, emit_receipts: true });
        const marker = `recorded ${randomUUID()}`;
        const res = await invoke(lean.url, agentId, suffix, {
          body: marker,
          headers: { cookie: 'caller=secret', 'x-gateway-anything': 'no', 'x-request-id': `lean-${marker.length}` },
        });
        assert.equal(res.status, ok, res.text);
        const invocationId = String(res.headers['x-gateway-invocation-id'] ?? res.json?.invocation_id);
        assert.match(invocationId, /^inv_/);
        assert.equal(res.headers['x-request-id'], `lean-${marker.length}`);
        const row = await waitForRow(invocationId, (r) => r.status === 'succeeded');
        assert.equal(row.agentId, agentId);
        const receipts = await waitFor(
          async () =>
            (
              await stack()
                .orm.em.getConnection()
                .execute<{ kid: string }[]>('select kid from receipts where invocation_id = ?', [invocationId])
            )[0],
          { what: `the receipt of ${invocationId}` },
        );
        assert.ok(receipts.kid);
        const seen = upstream.received.find((r) => r.body.toString() === marker)!;
        assert.equal(seen.headers.authorization, undefined);
        assert.equal(seen.headers.cookie, undefined);
        assert.equal(seen.headers['x-gateway-anything'], undefined);
        assert.equal(seen.headers['x-request-id'], `lean-${marker.length}`);
        if (suffix) {
          // The streamed answer's headers: the upstream's own kept, a cookie for the gateway's origin dropped.
          assert.equal(res.headers['x-upstream'], 'kept');
          assert.equal(res.headers['set-cookie'], undefined);
        }
      });
    });
  }

  it("takes the tenant's bucket: one agent's calls cannot spend another tenant's share", async () => {
    const fair = await startLeanOnly({
      rateLimit: { ...stack().config.rateLimit, tenantRps: 0.01, tenantBurst: 1 },
    });
    try {
      const own = await stack().token(`tenant-lean-fair-${randomUUID()}`);
      const [a, b] = [
        await createAgent(own, { upstream_url: upstream.url }),
        await createAgent(own, { upstream_url: upstream.url }),
      ];
      const other = await createAgent(token, { upstream_url: upstream.url });
      assert.equal((await callAt(fair.url, 'POST', `/v1/proxy/${a}/stream`, { token: own, body: 'x' })).status, 200);
      const refused = await callAt(fair.url, 'POST', `/v1/proxy/${b}/stream`, { token: own, body: 'x' });
      assert.equal(refused.status, 429, 'the tenant bucket covers all its agents');
      assert.equal((await callAt(fair.url, 'POST', `/v1/proxy/${other}`, { token, body: 'x' })).status, 202);
    } finally {
      await fair.close();
    }
  });

  it('keeps the SSRF guard: an upstream the allow-list does not admit is never reached', async () => {
    const guarded = await startLeanOnly({ upstream: { ...stack().config.upstream, allow: [] } });
    try {
      const agentId = await createAgent(token, { upstream_url: upstream.url });
      // Its own body: the upstream is shared with the calls other tests' workers still make.
      const body = `guarded-${agentId}`;
      const res = await callAt(guarded.url, 'POST', `/v1/proxy/${agentId}/stream`, { token, body });
      assert.equal(res.status, 502);
      assert.deepEqual(res.json, { error: 'upstream unreachable' });
      assert.ok(!upstream.received.some((r) => r.body.toString('utf8') === body));
    } finally {
      await guarded.close();
    }
  });

  it('leaves other methods and paths to the general stack: 405 with Allow, 404, and the same route behind a trailing slash', async () => {
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    const get = await call('GET', `/v1/proxy/${agentId}/stream`, { token });
    assert.equal(get.status, 405);
    assert.equal(get.headers.allow, 'POST');
    assert.equal((await call('POST', `/v1/proxy/${agentId}/nope`, { token, body: 'x' })).status, 404);
    const slash = await request(`${stack().apiUrl}/v1/proxy/${agentId}/stream/`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: 'through the router',
    });
    assert.equal(slash.statusCode, 200);
    assert.deepEqual(await slash.body.json(), { echo: 'through the router' });
    // The lean-only app sends what it does not serve on, to the tripwire.
    assert.equal((await callAt(lean.url, 'GET', `/v1/proxy/${agentId}/stream`, { token })).status, TRIPWIRE);
  });
});
