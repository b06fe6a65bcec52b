// One tenant cannot disturb another's calls through what the gateway shares between them: a
// tenant driving failures at an origin that other tenants' agents also use opens its own
// circuit breaker only, and the breaker map stays bounded however many tenants and origins a
// caller invents.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { createAgent, rawUpstream, readAll, startProxyApp } from '../support/proxy-helpers.ts';
import { connect, type AddressInfo } from 'node:net';
import { BreakerRegistry } from '../../gateway/upstream/breaker.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { callAt } from '../support/http.ts';
import { waitFor } from '../support/wait.ts';

function stream(token: string, agentId: string, path = '') {
  return request(`${stack().apiUrl}/v1/proxy/${agentId}/stream${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
    body: 'x',
  });
}

describe('hostile tenant: shared upstream origins', function () {
  this.timeout(60_000);

  it("a tenant's failing traffic to a shared origin opens its own breaker only; another tenant's calls there go on", async () => {
    // One origin, two agents' paths: the attacker's path fails, the victim's works.
    const shared = await rawUpstream((req, res) => {
      void readAll(req).then(() => {
        if (req.url?.startsWith('/fail')) {
          res.statusCode = 503;
          res.end('down');
        } else {
          res.end('ok');
        }
      });
    }, '/ok');
    try {
      const origin = new URL(shared.url).origin;
      const attacker = await stack().token(`attacker-${randomUUID()}`);
      const victim = await stack().token(`victim-${randomUUID()}`);
      const attackerAgent = await createAgent(attacker, { upstream_url: `${origin}/fail` });
      const victimAgent = await createAgent(victim, { upstream_url: `${origin}/ok` });

      // Enough failures to open a breaker (5 consecutive), then some more: the attacker's calls fail fast.
      const statuses: number[] = [];
      for (let i = 0; i < 8; i++) {
        const res = await stream(attacker, attackerAgent);
        await res.body.dump();
        statuses.push(res.statusCode);
      }
      assert.deepEqual(
        statuses.slice(0, 5),
        [503, 503, 503, 503, 503],
        'the upstream answered the first failures itself',
      );
      assert.ok(
        statuses.slice(5).every((s) => s === 502),
        `then the attacker's circuit is open: ${statuses.join(',')}`,
      );
      const failHits = shared.hits.filter((h) => h.url?.startsWith('/fail')).length;
      assert.equal(failHits, 5, 'calls on the open circuit were not sent');

      // The victim, same origin, other tenant: every call reaches the upstream and succeeds.
      for (let i = 0; i < 5; i++) {
        const res = await stream(victim, victimAgent);
        assert.equal(res.statusCode, 200, `victim call ${i}`);
        assert.equal(await res.body.text(), 'ok');
      }
      assert.equal(shared.hits.filter((h) => h.url?.startsWith('/ok')).length, 5);
    } finally {
      await shared.close();
    }
  });

  it('the breaker map is bounded: idle breakers are dropped, and the least recently used beyond the cap', async () => {
    let now = 0;
    const registry = new BreakerRegistry({}, { max: 50, idleMs: 200, now: () => now });
    for (let i = 0; i < 500; i++) registry.for(`https://origin-${i}.example/`, `tenant-${i % 7}`);
    assert.equal(registry.size, 50, 'capped');
    const kept = registry.for('https://origin-499.example/', 'tenant-2');
    assert.equal(registry.size, 50, 'a recent breaker is found again, not re-created');
    assert.equal(registry.for('https://origin-499.example/', 'tenant-2'), kept);
    now += 250;
    registry.for('https://fresh.example/', 'tenant-x');
    assert.equal(registry.size, 1, 'idle breakers dropped on the next insert');
  });
});

describe('hostile tenant: rates above the operator maximum', function () {
  this.timeout(60_000);

  it('rate_limit_rps and rate_limit_burst above RATE_LIMIT_AGENT_MAX_* are 400 on create and PATCH; at the maximum they are taken', async () => {
    const base = stack().config;
    const server = await startGateway(
      { ...base, port: 0, rateLimit: { ...base.rateLimit, agentMaxRps: 10, agentMaxBurst: 20 } },
      stack().orm,
      stack().temporal,
      createLogger('api', 'silent'),
    );
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const token = await stack().token(`rates-${randomUUID()}`);
      const create = (fields: Record<string, unknown>) =>
        callAt(url, 'POST', '/v1/agents', { token, json: { name: `rates-${randomUUID()}`, ...fields } });
      const tooFast = await create({ rate_limit_rps: 10.5 });
      assert.equal(tooFast.status, 400);
      assert.deepEqual(tooFast.json, { error: 'rate_limit_rps may be at most 10' });
      const tooDeep = await create({ rate_limit_rps: 5, rate_limit_burst: 21 });
      assert.equal(tooDeep.status, 400);
      assert.deepEqual(tooDeep.json, { error: 'rate_limit_burst may be at most 20' });
      const atMax = await create({ rate_limit_rps: 10, rate_limit_burst: 20 });
      assert.equal(atMax.status, 201, atMax.text);
      const patched = await callAt(url, 'PATCH', `/v1/agents/${atMax.json.id}`, {
        token,
        json: { rate_limit_rps: 1000 },
      });
      assert.equal(patched.status, 400);
      const unchanged = await callAt(url, 'GET', `/v1/agents/${atMax.json.id}`, { token });
      assert.equal(unchanged.json.rate_limit_rps, 10);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('hostile tenant: slow uploads', function () {
  this.timeout(60_000);

  it('a body trickled in (slow loris) is cut with 408 on the transactional endpoint and for MCP on the streaming one', async () => {
    const base = stack().config;
    const server = await startGateway(
      { ...base, port: 0, bodyPace: { timeoutMs: 20_000, minBytesPerSecond: 200, graceMs: 1_000 } },
      stack().orm,
      stack().temporal,
      createLogger('api', 'silent'),
    );
    const port = (server.address() as AddressInfo).port;
    try {
      const token = await stack().token(`slow-${randomUUID()}`);
      const httpAgent = await createAgent(token, { upstream_url: 'http://127.0.0.1:9/agent' });
      const mcpAgent = await createAgent(token, {
        upstream_url: 'http://127.0.0.1:9/agent',
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
      });
      for (const path of [`/v1/proxy/${httpAgent}`, `/v1/proxy/${mcpAgent}/stream`]) {
        // A body arriving above the minimum rate, started first: the trickle must be cut while
        // this one still goes on, so it is the rate that cut it (not BODY_READ_TIMEOUT_MS, which
        // would end this one first).
        const steady = connect(port, '127.0.0.1', () =>
          steady.write(
            `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{`,
          ),
        );
        let steadyAnswer = '';
        steady.on('data', (c: Buffer) => (steadyAnswer += c.toString()));
        steady.on('error', () => undefined);
        const flow = setInterval(() => steady.write(' '.repeat(300)), 250);
        steady.once('close', () => clearInterval(flow));
        const answer = await new Promise<string>((resolve, reject) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.write(
              `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{`,
            );
            const drip = setInterval(() => socket.write(' '), 500);
            socket.once('close', () => clearInterval(drip));
          });
          let text = '';
          socket.on('data', (c: Buffer) => {
            text += c.toString();
            if (text.includes('\r\n\r\n') && text.includes('}')) socket.destroy();
          });
          socket.once('close', () => resolve(text));
          socket.once('error', reject);
          setTimeout(() => socket.destroy(), 15_000);
        });
        assert.match(answer, /^HTTP\/1\.1 408 /, `${path}: ${answer.slice(0, 80)}`);
        assert.match(answer, /"error":"request body arrived too slowly"/);
        assert.equal(steadyAnswer, '', `${path}: the steady body was answered first: ${steadyAnswer.slice(0, 80)}`);
        assert.equal(steady.destroyed, false, `${path}: the steady body was cut first`);
        steady.destroy();
      }
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('hostile tenant: request bodies held in memory', function () {
  this.timeout(60_000);

  it("one tenant's bodies in flight are bounded (429), all tenants' too (503), both with Retry-After; released bytes admit calls again", async () => {
    const MiB = 1024 * 1024;
    // The proxy routes alone, so the test can read the budget: a stalled body counts once the
    // gateway holds its bytes.
    const app = await startProxyApp({ bodyBudget: { processBytes: 2.5 * MiB, tenantBytes: 1.5 * MiB } });
    const { url } = app;
    const port = Number(new URL(url).port);
    const held: Array<ReturnType<typeof connect>> = [];
    try {
      const upstream = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
      const tokens = {
        a: await stack().token(`held-a-${randomUUID()}`),
        b: await stack().token(`held-b-${randomUUID()}`),
        c: await stack().token(`held-c-${randomUUID()}`),
      };
      const agents = {
        a: await createAgent(tokens.a, { upstream_url: upstream.url }),
        b: await createAgent(tokens.b, { upstream_url: upstream.url }),
        c: await createAgent(tokens.c, { upstream_url: upstream.url }),
      };
      // A body that stops half-way: 1 MiB held, the rest never sent.
      const stall = async (token: string, agentId: string) => {
        const before = app.services.bodyBudget.held;
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(
            `POST /v1/proxy/${agentId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Length: ${2 * MiB}\r\n\r\n`,
          );
          socket.write(Buffer.alloc(MiB, 120));
        });
        socket.on('error', () => undefined);
        held.push(socket);
        await waitFor(() => app.services.bodyBudget.held >= before + MiB, { what: 'the stalled megabyte held' });
      };
      const send = (token: string, agentId: string) =>
        callAt(url, 'POST', `/v1/proxy/${agentId}`, { token, body: Buffer.alloc(MiB, 121) });

      await stall(tokens.a, agents.a);
      const sameTenant = await send(tokens.a, agents.a);
      assert.equal(sameTenant.status, 429, sameTenant.text);
      assert.equal(sameTenant.headers['retry-after'], '1');
      await stall(tokens.b, agents.b);
      const anyone = await send(tokens.c, agents.c);
      assert.equal(anyone.status, 503, anyone.text);
      assert.equal(anyone.headers['retry-after'], '1');

      // Their bytes are released as the server sees the sockets close: tenant A is admitted again.
      for (const socket of held) socket.destroy();
      const again = await waitFor(
        async () => {
          const res = await send(tokens.a, agents.a);
          return res.status === 429 ? null : res;
        },
        { everyMs: 50, what: "tenant A's held bytes to be released" },
      );
      assert.equal(again.status, 202, again.text);
      await upstream.close();
    } finally {
      for (const socket of held) socket.destroy();
      await app.close();
    }
  });
});

describe('hostile tenant: connections to a shared origin', function () {
  this.timeout(60_000);

  it("one tenant's slow calls hold at most its own share of an origin's connections; another tenant's calls there are not queued behind them", async () => {
    const held: Array<() => void> = [];
    const shared = await rawUpstream((req, res) => {
      void readAll(req).then(() => {
        if (req.url?.startsWith('/slow')) held.push(() => res.end('late'));
        else res.end('fast');
      });
    }, '/fast');
    const base = stack().config;
    const server = await startGateway(
      { ...base, port: 0, upstream: { ...base.upstream, tenantConnections: 2 } },
      stack().orm,
      stack().temporal,
      createLogger('api', 'silent'),
    );
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const origin = new URL(shared.url).origin;
      const hog = await stack().token(`hog-${randomUUID()}`);
      const other = await stack().token(`other-${randomUUID()}`);
      const slowAgent = await createAgent(hog, { upstream_url: `${origin}/slow` });
      const fastAgent = await createAgent(other, { upstream_url: `${origin}/fast` });
      const send = (token: string, agentId: string) =>
        request(`${url}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: 'x',
        }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));

      const slowHits = () => shared.hits.filter((h) => h.url?.startsWith('/slow')).length;
      const hogging = Array.from({ length: 5 }, () => send(hog, slowAgent));
      await waitFor(() => slowHits() >= 2, { what: "the hog's first two requests to reach the origin" });
      const fast = await send(other, fastAgent);
      assert.deepEqual(fast, { status: 200, text: 'fast' }, 'the other tenant is answered at once');
      // Sent before the other tenant's call, which has come back: the hog's other three still wait.
      assert.equal(slowHits(), 2, 'the hog has two requests open; the rest wait for them');

      // The hog's waiting calls go through, two at a time, as its own calls finish.
      for (let released = 0; released < 5; released++) {
        await waitFor(() => held.length > 0, { what: "a hog's call to reach the origin" });
        held.shift()!();
        assert.ok(slowHits() - released <= 2, 'never more than two of the hog’s requests open');
      }
      const answers = await Promise.all(hogging);
      assert.ok(
        answers.every((a) => a.status === 200 && a.text === 'late'),
        JSON.stringify(answers),
      );
    } finally {
      for (const end of held) end();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await shared.close();
    }
  });
});
