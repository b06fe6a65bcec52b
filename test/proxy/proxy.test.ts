// The transactional endpoint end to end: gate order, the 202 and the poll, X-Request-ID, the
// header block-list, MCP parsing, the outcome rule for upstream 4xx/5xx, retries, redirects
// and the breaker as seen through HTTP. Upstreams are real local HTTP servers.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { closedPort, createAgent, invocationRow, nodeRequest, rawUpstream, readAll } from '../support/proxy-helpers.ts';
import { AgentSchema } from '../../gateway/db/entities.ts';

async function invoke(
  token: string,
  agentId: string,
  body: string | Buffer = 'x',
  headers: Record<string, string> = {},
) {
  return call('POST', `/v1/proxy/${agentId}`, { token, body, headers });
}

describe('proxy: transactional invocations', () => {
  let echo: TestUpstream;
  let token: string;
  before(async () => {
    echo = await startUpstream();
    token = await stack().token(`tenant-proxy-${randomUUID()}`);
  });
  after(() => echo.close());

  describe('gate order', () => {
    it('answers 404 for an unknown agent, a malformed id and another tenant’s agent', async () => {
      const agentId = await createAgent(token, { upstream_url: echo.url });
      const stranger = await stack().token(`tenant-other-${randomUUID()}`);
      assert.equal((await invoke(token, 'agt_01890000-0000-7000-8000-000000000000')).status, 404);
      assert.equal((await invoke(token, 'not-an-id')).status, 404);
      const res = await invoke(stranger, agentId);
      assert.equal(res.status, 404);
      assert.deepEqual(res.json, { error: 'not found' });
    });

    it('answers 422 for pending, suspended and deleted agents, before reading a body over the cap', async () => {
      const pending = await createAgent(token, {});
      const suspended = await createAgent(token, { upstream_url: echo.url });
      const deleted = await createAgent(token, { upstream_url: echo.url });
      const em = stack().orm.em.fork();
      await em.nativeUpdate(AgentSchema, { id: suspended }, { suspended: true });
      await em.nativeUpdate(AgentSchema, { id: deleted }, { deletedAt: new Date() });
      const huge = Buffer.alloc(32 * 1024 * 1024 + 1);
      for (const id of [pending, suspended, deleted]) {
        const res = await invoke(token, id, huge);
        assert.equal(res.status, 422, id);
        assert.ok(res.json.error);
      }
      assert.equal(echo.received.length, 0);
    });

    it('answers 429 before 413: a rate-limited caller is refused before its body is read', async () => {
      const agentId = await createAgent(token, { upstream_url: echo.url, rate_limit_rps: 0.01, rate_limit_burst: 1 });
      assert.equal((await invoke(token, agentId, 'first')).status, 202);
      const res = await invoke(token, agentId, Buffer.alloc(32 * 1024 * 1024 + 1));
      assert.equal(res.status, 429);
      assert.match(String(res.headers['retry-after']), /^\d+$/);
    });

    it('answers 413 for a body over 32 MiB and accepts one of exactly 32 MiB', async () => {
      // It answers how many bytes it got: echoing 32 MiB as JSON (~190 MiB of escapes) took the
      // test's own process past the stack's 5 s upstream deadline with the cores shared by shards.
      const counting = await startUpstream((req, res) => res.end(String(req.body.length)));
      try {
        const agentId = await createAgent(token, { upstream_url: counting.url });
        const over = await invoke(token, agentId, Buffer.alloc(32 * 1024 * 1024 + 1, 1));
        assert.equal(over.status, 413);
        assert.deepEqual(over.json, { error: 'request body exceeds 32 MiB' });

        // Without Content-Length the cap is found while reading, without holding more than it.
        const chunked = await request(`${stack().apiUrl}/v1/proxy/${agentId}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: Readable.from(
            (function* () {
              for (let i = 0; i < 40; i++) yield Buffer.alloc(1024 * 1024, 2);
            })(),
          ),
        }).catch((err: Error) => err);
        if (!(chunked instanceof Error)) {
          assert.equal(chunked.statusCode, 413);
          await chunked.body.dump();
        }

        const exact = await invoke(token, agentId, Buffer.alloc(32 * 1024 * 1024, 3));
        assert.equal(exact.status, 202);
        const done = await waitForInvocation(token, agentId, exact.json.invocation_id);
        assert.equal(done.status, 'succeeded', JSON.stringify({ ...done, response_body_b64: undefined }));
        const row = await invocationRow(exact.json.invocation_id);
        assert.equal(row?.requestBytes, 32 * 1024 * 1024);
        assert.deepEqual(
          counting.received.map((r) => r.body.length),
          [32 * 1024 * 1024],
          'only the call within the cap reached the upstream, whole',
        );
      } finally {
        await counting.close();
      }
    });

    it('answers 400 for an X-Gateway-Model over 256 bytes and records one of 256', async () => {
      const agentId = await createAgent(token, { upstream_url: echo.url });
      const bad = await invoke(token, agentId, 'x', { 'x-gateway-model': 'm'.repeat(257) });
      assert.equal(bad.status, 400);
      const model = 'é'.repeat(128); // 256 bytes in UTF-8
      const ok = await invoke(token, agentId, 'x', { 'x-gateway-model': model });
      assert.equal(ok.status, 202);
      const done = await waitForInvocation(token, agentId, ok.json.invocation_id);
      assert.equal(done.model, model);
    });
  });

  describe('request id and headers', () => {
    it('honours X-Request-ID, forwards it and returns it; injects one when absent or unusable', async () => {
      const agentId = await createAgent(token, { upstream_url: echo.url });
      const given = await invoke(token, agentId, 'rid-1', { 'x-request-id': 'caller-req-42' });
      assert.equal(given.headers['x-request-id'], 'caller-req-42');
      await waitForInvocation(token, agentId, given.json.invocation_id);
      assert.equal(echo.received.find((r) => r.body.toString() === 'rid-1')?.headers['x-request-id'], 'caller-req-42');

      const injected = await invoke(token, agentId, 'rid-2');
      const rid = String(injected.headers['x-request-id']);
      assert.match(rid, /^[0-9a-f-]{36}$/);
      await waitForInvocation(token, agentId, injected.json.invocation_id);
      assert.equal(echo.received.find((r) => r.body.toString() === 'rid-2')?.headers['x-request-id'], rid);
      const listed = await call('GET', `/v1/proxy/${agentId}/invocations/${injected.json.invocation_id}`, { token });
      assert.equal(listed.json.request_id, rid);

      const unusable = await invoke(token, agentId, 'rid-3', { 'x-request-id': 'x'.repeat(300) });
      assert.match(String(unusable.headers['x-request-id']), /^[0-9a-f-]{36}$/);

      // Error answers carry it too.
      const missing = await call('POST', '/v1/proxy/agt_01890000-0000-7000-8000-000000000000', {
        token,
        body: 'x',
        headers: { 'x-request-id': 'on-404' },
      });
      assert.equal(missing.headers['x-request-id'], 'on-404');
    });

    it('never forwards the block-listed caller headers; forwards the rest', async () => {
      const agentId = await createAgent(token, { upstream_url: echo.url });
      const res = await nodeRequest(
        'POST',
        `/v1/proxy/${agentId}`,
        {
          authorization: `Bearer ${token}`,
          cookie: 'session=secret',
          'proxy-authorization': 'Basic c2VjcmV0',
          'x-gateway-model': 'gpt-test',
          'x-gateway-anything': 'ours',
          'x-forwarded-for': '10.0.0.1',
          forwarded: 'for=10.0.0.1',
          'x-real-ip': '10.0.0.1',
          connection: 'x-hop-header',
          'x-hop-header': 'hop',
          'keep-alive': 'timeout=5',
          'content-type': 'application/json',
          'x-custom': 'kept',
          accept: 'application/json',
        },
        'headers-1',
      );
      assert.equal(res.status, 202);
      await waitForInvocation(token, agentId, res.json.invocation_id);
      const seen = echo.received.find((r) => r.body.toString() === 'headers-1');
      assert.ok(seen);
      for (const blocked of [
        'authorization',
        'cookie',
        'proxy-authorization',
        'x-gateway-model',
        'x-gateway-anything',
        'x-forwarded-for',
        'forwarded',
        'x-real-ip',
        'x-hop-header',
        'keep-alive',
        'x-payment',
      ]) {
        assert.equal(seen.headers[blocked], undefined, `${blocked} must not reach the upstream`);
      }
      assert.equal(seen.headers['x-custom'], 'kept');
      assert.equal(seen.headers['content-type'], 'application/json');
      assert.equal(seen.headers.accept, 'application/json');
      assert.equal(seen.headers.host, new URL(echo.url).host);
    });
  });

  describe('202, poll and capture', () => {
    it('records status, latency, TTFT, caller and model; the body only when captured and complete', async () => {
      // The upstream thinks 300 ms before it answers; the recorded latency must cover the time
      // it measured itself from the request's arrival to its answer.
      let heldMs = 0;
      const slow = await rawUpstream((req, res) => {
        const arrived = performance.now();
        void readAll(req).then(() =>
          setTimeout(() => {
            heldMs = performance.now() - arrived;
            res.end('slow answer');
          }, 300),
        );
      });
      try {
        const captured = await createAgent(token, { upstream_url: slow.url, capture_body: true });
        const res = await invoke(token, captured, 'capture me', { 'x-gateway-model': 'model-a' });
        assert.equal(res.status, 202);
        assert.equal(res.headers['x-gateway-invocation-id'], res.json.invocation_id);
        const early = await call('GET', `/v1/proxy/${captured}/invocations/${res.json.invocation_id}`, { token });
        assert.ok(['pending', 'running'].includes(early.json.status));
        assert.equal(early.json.response_body_b64, undefined);
        const done = await waitForInvocation(token, captured, res.json.invocation_id);
        assert.equal(done.status, 'succeeded');
        assert.equal(Buffer.from(done.response_body_b64, 'base64').toString(), 'slow answer');
        assert.ok(done.latency_ms >= Math.floor(heldMs), `latency ${done.latency_ms}, upstream held ${heldMs} ms`);
        assert.ok(done.ttft_ms <= done.latency_ms);
        assert.equal(done.model, 'model-a');
        assert.equal(done.mode, 'transactional');
        for (const field of [
          'mcp_method',
          'mcp_tool',
          'payment_network',
          'payment_asset',
          'payment_amount',
          'payment_payer',
          'payment_nonce',
        ])
          assert.equal(done[field], null);
        assert.equal((await invocationRow(res.json.invocation_id))?.caller, 'user-1');

        const notCaptured = await createAgent(token, { upstream_url: echo.url });
        const plain = await invoke(token, notCaptured, 'no capture');
        const plainDone = await waitForInvocation(token, notCaptured, plain.json.invocation_id);
        assert.equal(plainDone.response_body_b64, undefined);
      } finally {
        await slow.close();
      }
    });

    it('answers 404 when polling an invocation through another agent of the tenant', async () => {
      const a = await createAgent(token, { upstream_url: echo.url });
      const b = await createAgent(token, { upstream_url: echo.url });
      const res = await invoke(token, a, 'x');
      assert.equal((await call('GET', `/v1/proxy/${b}/invocations/${res.json.invocation_id}`, { token })).status, 404);
      assert.equal((await call('GET', `/v1/proxy/${a}/invocations/inv_nonsense`, { token })).status, 404);
    });
  });

  describe('MCP agents', () => {
    it('requires one JSON-RPC 2.0 request and records method and tool', async () => {
      const agentId = await createAgent(token, {
        upstream_url: echo.url,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
      });
      for (const bad of [
        'not json',
        '[{"jsonrpc":"2.0","method":"a","id":1}]',
        '{"jsonrpc":"1.0","method":"a","id":1}',
        '{"jsonrpc":"2.0","id":1}',
      ]) {
        const res = await invoke(token, agentId, bad, { 'content-type': 'application/json' });
        assert.equal(res.status, 400, bad);
      }
      const tool = await invoke(
        token,
        agentId,
        JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'search', arguments: {} } }),
        { 'content-type': 'application/json' },
      );
      assert.equal(tool.status, 202);
      const done = await waitForInvocation(token, agentId, tool.json.invocation_id);
      assert.equal(done.mcp_method, 'tools/call');
      assert.equal(done.mcp_tool, 'search');
      const list = await invoke(token, agentId, JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/list' }));
      const listed = await waitForInvocation(token, agentId, list.json.invocation_id);
      assert.equal(listed.mcp_method, 'tools/list');
      assert.equal(listed.mcp_tool, null);
    });
  });

  describe('outcome rule and retries', () => {
    it('completes a 4xx or 500 answer as succeeded with its status; a final 503 is failed', async () => {
      const statuses = [404, 500, 503];
      for (const status of statuses) {
        const up = await rawUpstream((req, res) => {
          void readAll(req).then(() => {
            res.statusCode = status;
            res.end('answer');
          });
        });
        try {
          const agentId = await createAgent(token, { upstream_url: up.url });
          const res = await invoke(token, agentId);
          const done = await waitForInvocation(token, agentId, res.json.invocation_id);
          assert.equal(done.upstream_status, status);
          assert.equal(done.status, status === 503 ? 'failed' : 'succeeded', String(status));
          assert.equal(done.error_class, status >= 500 ? 'upstream_5xx' : 'upstream_4xx');
          // Not opted in: the POST reached the upstream, so it is sent once.
          assert.equal(up.hits.length, 1);
        } finally {
          await up.close();
        }
      }
    });

    it('re-sends on 503 and on 429 (honouring Retry-After) only for an agent that opted in', async () => {
      const answers = [503, 429, 200];
      let seen = 0;
      const up = await rawUpstream((req, res) => {
        void readAll(req).then((body) => {
          seen += 1;
          const status = answers[Math.min(seen - 1, answers.length - 1)];
          res.statusCode = status;
          if (status === 429) res.setHeader('retry-after', '1');
          res.end(status === 200 ? `ok ${body}` : 'busy');
        });
      });
      try {
        const agentId = await createAgent(token, {
          upstream_url: up.url,
          retry_non_idempotent: true,
          capture_body: true,
        });
        const res = await invoke(token, agentId, 'again');
        const done = await waitForInvocation(token, agentId, res.json.invocation_id);
        assert.equal(done.status, 'succeeded');
        assert.equal(done.upstream_status, 200);
        assert.equal(Buffer.from(done.response_body_b64, 'base64').toString(), 'ok again');
        // Re-sent after the 429 too; how long it waits for Retry-After is the upstream client's
        // rule, asserted on its own clock in proxy-resilience.test.ts.
        assert.equal(seen, 3);
        assert.equal(
          (await invocationRow(res.json.invocation_id))?.attempts,
          1,
          'one activity attempt did the retries',
        );
      } finally {
        await up.close();
      }
    });

    it('fails a refused upstream as connect, and a silent one as timeout', async () => {
      const port = await closedPort();
      const refused = await createAgent(token, { upstream_url: `http://127.0.0.1:${port}/x` });
      const r1 = await invoke(token, refused);
      const d1 = await waitForInvocation(token, refused, r1.json.invocation_id);
      assert.equal(d1.status, 'failed');
      assert.equal(d1.error_class, 'connect');
      assert.equal(d1.upstream_status, null);

      const silent = await rawUpstream(() => undefined);
      try {
        const agentId = await createAgent(token, { upstream_url: silent.url });
        const r2 = await invoke(token, agentId);
        const d2 = await waitForInvocation(token, agentId, r2.json.invocation_id, 20_000);
        assert.equal(d2.status, 'failed');
        assert.equal(d2.error_class, 'timeout');
        assert.equal(silent.hits.length, 1, 'a POST that reached the upstream is not re-sent');
      } finally {
        await silent.close();
      }
    });

    it('does not follow redirects, not even to an allowed host', async () => {
      const target = await startUpstream();
      const redirecting = await rawUpstream((req, res) => {
        void readAll(req).then(() => {
          res.writeHead(302, { location: target.url });
          res.end();
        });
      });
      try {
        const agentId = await createAgent(token, { upstream_url: redirecting.url });
        const res = await invoke(token, agentId);
        const done = await waitForInvocation(token, agentId, res.json.invocation_id);
        assert.equal(done.status, 'succeeded');
        assert.equal(done.upstream_status, 302);
        assert.equal(target.received.length, 0);
      } finally {
        await redirecting.close();
        await target.close();
      }
    });

    it('opens the upstream’s breaker after consecutive failures and then fails fast as circuit_open', async () => {
      const failing = await rawUpstream((req, res) => {
        void readAll(req).then(() => {
          res.statusCode = 500;
          res.end('broken');
        });
      });
      try {
        const agentId = await createAgent(token, { upstream_url: failing.url });
        for (let i = 0; i < 5; i++) {
          const res = await invoke(token, agentId);
          const done = await waitForInvocation(token, agentId, res.json.invocation_id);
          assert.equal(done.upstream_status, 500);
        }
        const res = await invoke(token, agentId);
        const done = await waitForInvocation(token, agentId, res.json.invocation_id);
        assert.equal(done.status, 'failed');
        assert.equal(done.error_class, 'circuit_open');
        assert.equal(failing.hits.length, 5, 'nothing was sent while the circuit was open');
      } finally {
        await failing.close();
      }
    });
  });
});
