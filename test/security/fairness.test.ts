// Fairness between tenants under a hostile tenant's load: what the gateway shares (its rate
// budget, the connections to an origin) is bounded per tenant, a call refused for what it sent
// costs no rate-limit token, a tenant's agents (each with its own bucket) are bounded in number,
// and a long stream holds its tenant's connection slot for its whole life.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ServerResponse } from 'node:http';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { call, callAt } from '../support/http.ts';
import { createAgent, rawUpstream, readAll, startProxyApp, type RawUpstream } from '../support/proxy-helpers.ts';
import { createMemoryLimiter, createRedisLimiter, type RateLimiter } from '../../gateway/ratelimit/index.ts';
import { loadGatewayConfig } from '../../gateway/config.ts';
import { startCapturedGateway } from '../support/catalog.ts';

// The run's own Redis (test/support/stack.ts), read once the stack is up.
const redisUrl = () => stack().redisUrl;

/** Waits for `check` to hold, polling; fails with `what` after 15 s. */
async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  await waitFor(check, { timeoutMs: 15_000, what });
}

function streamAt(base: string, token: string, agentId: string, headers: Record<string, string> = {}, body = 'x') {
  return request(`${base}/v1/proxy/${agentId}/stream`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
    body,
  });
}

async function statusOf(reply: ReturnType<typeof streamAt>): Promise<number> {
  const res = await reply;
  await res.body.dump();
  return res.statusCode;
}

describe('fairness between tenants', function () {
  this.timeout(120_000);
  let up: RawUpstream;
  before(async () => {
    up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('{"ok":true}')));
  });
  after(() => up.close());

  describe('the global rate limit is shared fairly', () => {
    for (const kind of ['memory', 'redis'] as const) {
      it(`a tenant flooding many fast agents does not make a quiet tenant's calls 429 (${kind} limiter)`, async () => {
        // Small numbers so the flood is short: the global bucket holds 40 (40/s), a tenant 15 (15/s).
        // The flooder takes at most 15 + 15/s of it, the quiet tenant about 10/s: the global bucket
        // never runs dry, however fast the flood. Without the tenant bucket the flood drains it.
        const limiter: RateLimiter =
          kind === 'redis'
            ? createRedisLimiter(redisUrl(), { prefix: `gw:rl:fair:${randomUUID()}:` })
            : createMemoryLimiter();
        const gateway = await startProxyApp(
          {
            rateLimit: {
              ...stack().config.rateLimit,
              tenantRps: 15,
              tenantBurst: 15,
              globalRps: 40,
              globalBurst: 40,
            },
          },
          { limiter },
        );
        try {
          const flooder = await stack().token(`flooder-${randomUUID()}`);
          const quiet = await stack().token(`quiet-${randomUUID()}`);
          const floodAgents: string[] = [];
          for (let i = 0; i < 4; i++)
            floodAgents.push(await createAgent(flooder, { upstream_url: up.url, rate_limit_rps: 1000 }));
          const quietAgent = await createAgent(quiet, { upstream_url: up.url, rate_limit_rps: 10 });

          let quietDone = false;
          const floodStatuses = new Map<number, number>();
          // 8 callers, each alternating a call refused for its X-Gateway-Model (400) and a valid one;
          // bounded in count, and over once the quiet tenant is done.
          let sent = 0;
          const flood = Array.from({ length: 8 }, async (_, worker) => {
            for (let i = 0; !quietDone && sent < 3_000; i++) {
              sent++;
              const agentId = floodAgents[(worker + i) % floodAgents.length];
              const headers: Record<string, string> = i % 2 === 0 ? { 'x-gateway-model': 'm'.repeat(300) } : {};
              const status = await statusOf(streamAt(gateway.url, flooder, agentId, headers));
              floodStatuses.set(status, (floodStatuses.get(status) ?? 0) + 1);
            }
          });
          // The flood is under way (its tenant bucket is empty) before the quiet tenant starts.
          await until('the flood to be refused', () => (floodStatuses.get(429) ?? 0) > 0);
          const quietStatuses: number[] = [];
          for (let i = 0; i < 20; i++) {
            quietStatuses.push(await statusOf(streamAt(gateway.url, quiet, quietAgent)));
            await new Promise((r) => setTimeout(r, 100)); // its own pace: about 10 calls a second
          }
          quietDone = true;
          await Promise.all(flood);
          assert.deepEqual(quietStatuses, Array(20).fill(200), JSON.stringify([...floodStatuses]));
          assert.ok((floodStatuses.get(400) ?? 0) > 0 && (floodStatuses.get(429) ?? 0) > 0);
        } finally {
          await gateway.close();
        }
      });
    }

    it('refuses a tenant rate at or above the global one at start, naming both settings', () => {
      const env = { AUTH_JWT_SECRET: 'x'.repeat(32) };
      const defaults = loadGatewayConfig(env).rateLimit;
      assert.deepEqual([defaults.tenantRps, defaults.tenantBurst], [500, 1000], 'a quarter of the global bucket');
      assert.throws(
        () => loadGatewayConfig({ ...env, RATE_LIMIT_TENANT_RPS: '2000' }),
        /RATE_LIMIT_TENANT_RPS must be below RATE_LIMIT_GLOBAL_RPS/,
      );
      assert.throws(
        () => loadGatewayConfig({ ...env, RATE_LIMIT_GLOBAL_BURST: '10', RATE_LIMIT_TENANT_BURST: '10' }),
        /RATE_LIMIT_TENANT_BURST must be below RATE_LIMIT_GLOBAL_BURST/,
      );
      assert.equal(loadGatewayConfig({ ...env, TENANT_MAX_AGENTS: '5' }).tenantMaxAgents, 5);
    });
  });

  describe('a call refused for what it sent takes no rate-limit token', () => {
    for (const kind of ['memory', 'redis'] as const) {
      it(`giveBack returns the token a take spent, never past the burst (${kind})`, async () => {
        const limiter: RateLimiter =
          kind === 'redis'
            ? createRedisLimiter(redisUrl(), { prefix: `gw:rl:give:${randomUUID()}:` })
            : createMemoryLimiter();
        try {
          const buckets = [
            { key: 'agent:a', rate: 0.001, burst: 2 },
            { key: 'tenant:t', rate: 0.001, burst: 5 },
          ];
          assert.equal((await limiter.take(buckets)).allowed, true);
          assert.equal((await limiter.take(buckets)).allowed, true);
          assert.equal((await limiter.take(buckets)).allowed, false);
          await limiter.giveBack(buckets);
          assert.equal((await limiter.take(buckets)).allowed, true, 'the token given back is taken again');
          assert.equal((await limiter.take(buckets)).allowed, false);
          // Given back more often than taken: still no more than the burst.
          for (let i = 0; i < 5; i++) await limiter.giveBack(buckets);
          const after = [];
          for (let i = 0; i < 3; i++) after.push((await limiter.take(buckets)).allowed);
          assert.deepEqual(after, [true, true, false]);
        } finally {
          await limiter.close();
        }
      });
    }

    it('oversized X-Gateway-Model (400), an unparseable MCP body (400) and a body over the cap (413) leave the burst whole', async () => {
      const token = await stack().token(`free-checks-${randomUUID()}`);
      // One token per 100 s: nothing refills during the test, so every token spent shows.
      const agentId = await createAgent(token, {
        upstream_url: up.url,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        mcp_protocol_version: '2025-06-18',
        rate_limit_rps: 0.01,
        rate_limit_burst: 3,
      });
      const send = (headers: Record<string, string>, body: string | Buffer) =>
        request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
          body,
        }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));
      const valid = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });

      for (let i = 0; i < 5; i++) {
        const refused = await send({ 'x-gateway-model': 'm'.repeat(300) }, valid);
        assert.deepEqual(refused, { status: 400, text: '{"error":"X-Gateway-Model exceeds 256 bytes"}' });
      }
      for (let i = 0; i < 3; i++) assert.equal((await send({}, '{"not":"json-rpc"}')).status, 400);
      const tooLarge = await send({}, Buffer.alloc(32 * 1024 * 1024 + 1, 0x20));
      assert.equal(tooLarge.status, 413);
      // Also on the transactional endpoint.
      assert.equal(
        (
          await call('POST', `/v1/proxy/${agentId}`, {
            token,
            body: '[]',
            headers: { 'x-gateway-model': 'm'.repeat(300) },
          })
        ).status,
        400,
      );
      assert.equal((await call('POST', `/v1/proxy/${agentId}`, { token, body: '[]' })).status, 400);

      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await send({}, valid)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429], 'the burst of 3 is still whole');
    });
    it('a refusal that cost the gateway work keeps its token: a large unparseable body, a chunked body over the cap', async () => {
      const token = await stack().token(`costly-checks-${randomUUID()}`);
      const agentId = await createAgent(token, {
        upstream_url: up.url,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        mcp_protocol_version: '2025-06-18',
        rate_limit_rps: 0.01,
        rate_limit_burst: 3,
      });
      const send = (body: string | Readable) =>
        request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body,
        }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));
      // Parsed whole before it is refused: 100 KiB of JSON that is no JSON-RPC request.
      const large = JSON.stringify({ padding: 'x'.repeat(100 * 1024) });
      assert.equal((await send(large)).status, 400);
      assert.equal((await send(large)).status, 400);
      // No declared length: read up to the cap before it is refused.
      function* chunks() {
        for (let i = 0; i < 33; i++) yield Buffer.alloc(1024 * 1024, 0x20);
      }
      assert.equal((await send(Readable.from(chunks()))).status, 413);
      const valid = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
      assert.equal((await send(valid)).status, 429, 'the three refusals each spent a token');
    });
  });

  describe('TENANT_MAX_AGENTS', () => {
    it('refuses an agent beyond the bound with 409 naming it, under concurrent creates; deleting one makes room', async () => {
      const gateway = await startCapturedGateway({ tenantMaxAgents: 3 });
      const { url } = gateway;
      try {
        const token = await stack().token(`max-agents-${randomUUID()}`);
        const create = () =>
          callAt(url, 'POST', '/v1/agents', { token, json: { name: `a-${randomUUID()}`, upstream_url: up.url } });
        const answers = await Promise.all(Array.from({ length: 8 }, create));
        const created = answers.filter((a) => a.status === 201);
        const refused = answers.filter((a) => a.status === 409);
        assert.equal(created.length, 3, answers.map((a) => a.status).join(','));
        assert.equal(refused.length, 5);
        assert.deepEqual(refused[0].json, {
          error: 'this tenant has 3 active or pending agents, the most allowed; delete one first',
        });
        // Another tenant is not affected.
        const other = await stack().token(`max-agents-other-${randomUUID()}`);
        assert.equal((await callAt(url, 'POST', '/v1/agents', { token: other, json: { name: 'x' } })).status, 201);
        // A deleted agent no longer counts.
        assert.equal((await callAt(url, 'DELETE', `/v1/agents/${created[0].json.id}`, { token })).status, 204);
        assert.equal((await create()).status, 201);
        assert.equal((await create()).status, 409);
      } finally {
        await gateway.close();
      }
    });
  });

  describe('connection slots and long streams', () => {
    it("a tenant's long streams hold their slots for their whole life; another tenant's calls to the origin go through", async () => {
      const longs: ServerResponse[] = [];
      let longsOpen = 0;
      let hungUp = false;
      const shortHits: Array<{ path: string; hungUp: boolean }> = [];
      const shared = await rawUpstream((req, res) => {
        void readAll(req).then(() => {
          if (req.url?.startsWith('/long')) {
            // Headers and a first chunk at once, then the stream stays open.
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            res.write('data: first\n\n');
            longsOpen++;
            res.on('close', () => longsOpen--);
            longs.push(res);
          } else {
            shortHits.push({ path: String(req.url), hungUp });
            res.end('short');
          }
        });
      }, '/long');
      const gateway = await startCapturedGateway({
        upstream: { ...stack().config.upstream, tenantConnections: 2 },
      });
      const { url } = gateway;
      try {
        const origin = new URL(shared.url).origin;
        const hog = await stack().token(`stream-hog-${randomUUID()}`);
        const other = await stack().token(`stream-other-${randomUUID()}`);
        const longAgent = await createAgent(hog, { upstream_url: `${origin}/long` });
        const hogShort = await createAgent(hog, { upstream_url: `${origin}/hog-short` });
        const otherShort = await createAgent(other, { upstream_url: `${origin}/other-short` });

        // Two long streams: their headers and first bytes have arrived.
        const first = await streamAt(url, hog, longAgent);
        const second = await streamAt(url, hog, longAgent);
        assert.deepEqual([first.statusCode, second.statusCode], [200, 200]);
        await until('both streams open upstream', () => longsOpen === 2);

        // The hog's short call waits for one of its own slots (the existing rule), once it is past the gate.
        const waiting = streamAt(url, hog, hogShort).then(async (r) => ({
          status: r.statusCode,
          text: await r.body.text(),
        }));
        await until('the waiting call to be recorded', async () => {
          const listed = await call('GET', `/v1/invocations?agent_id=${hogShort}`, { token: hog });
          return listed.json.data.length === 1;
        });
        // Another tenant, same origin: answered while the hog's slots are taken.
        const otherAnswer = await streamAt(url, other, otherShort);
        assert.equal(otherAnswer.statusCode, 200);
        assert.equal(await otherAnswer.body.text(), 'short');

        // The caller hangs up one long stream: its slot comes back, and the waiting call goes through.
        assert.deepEqual(
          shortHits.map((h) => h.path),
          ['/other-short'],
        );
        hungUp = true;
        first.body.destroy();
        assert.deepEqual(await waiting, { status: 200, text: 'short' });
        assert.deepEqual(
          shortHits.filter((h) => h.path === '/hog-short'),
          [{ path: '/hog-short', hungUp: true }],
          'the waiting call reached the origin only once a long stream had ended',
        );

        // The upstream ends the other: that slot too is given back.
        longs[1].end('data: last\n\n');
        assert.match(await second.body.text(), /data: last/);
        const after = await Promise.all([streamAt(url, hog, hogShort), streamAt(url, hog, hogShort)].map(statusOf));
        assert.deepEqual(after, [200, 200]);
      } finally {
        for (const res of longs) res.destroy();
        await gateway.close();
        await shared.close();
      }
    });
  });

  describe('metrics', () => {
    it('counts streaming outcomes in gateway_upstream_outcomes_total', async () => {
      const scrape = async (labels: string) => {
        const res = await request(stack().metricsUrl);
        const text = await res.body.text();
        const line = text.split('\n').find((l) => l.startsWith(`gateway_upstream_outcomes_total{${labels}}`));
        return line ? Number(line.split(' ').pop()) : 0;
      };
      const ok = 'mode="streaming",error_class="none"';
      const failed = 'mode="streaming",error_class="upstream_5xx"';
      const [okBefore, failedBefore] = [await scrape(ok), await scrape(failed)];
      const token = await stack().token(`stream-metrics-${randomUUID()}`);
      const failing = await rawUpstream((req, res) => {
        void readAll(req).then(() => {
          res.statusCode = 502;
          res.end('down');
        });
      });
      try {
        const agentId = await createAgent(token, { upstream_url: up.url });
        const failingAgent = await createAgent(token, { upstream_url: failing.url });
        assert.equal(await statusOf(streamAt(stack().apiUrl, token, agentId)), 200);
        assert.equal(await statusOf(streamAt(stack().apiUrl, token, failingAgent)), 502);
        await until('the streaming outcomes to be counted', async () => (await scrape(ok)) >= okBefore + 1);
        await until(
          'the failed streaming outcome to be counted',
          async () => (await scrape(failed)) >= failedBefore + 1,
        );
      } finally {
        await failing.close();
      }
    });
  });
});
