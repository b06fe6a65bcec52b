// The streaming endpoint end to end against real local upstreams: pass-through of status,
// headers and body as bytes arrive, the ids set before any upstream byte, SSE, flat memory,
// hang-ups both ways, coarse 502/504 before the first byte, and the row written and completed.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { closedPort, createAgent, nodeRequest, rawUpstream, readAll, waitForRow } from '../support/proxy-helpers.ts';
import { AgentSchema } from '../../gateway/db/entities.ts';
import { waitFor } from '../support/wait.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function stream(
  token: string,
  agentId: string,
  body: string | Buffer | Readable = 'x',
  headers: Record<string, string> = {},
  signal?: AbortSignal,
) {
  return request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...headers },
    body,
    signal,
  });
}

describe('proxy: streaming invocations', () => {
  let token: string;
  before(async () => {
    token = await stack().token(`tenant-stream-${randomUUID()}`);
  });

  it('passes the upstream’s status, headers (minus hop-by-hop and origin-wide ones) and body through, and records the call', async () => {
    const up = await rawUpstream((req, res) => {
      void readAll(req).then((body) => {
        res.writeHead(201, {
          'content-type': 'application/json',
          'x-upstream': 'yes',
          'cache-control': 'no-store',
          connection: 'x-hop',
          'x-hop': '1',
          'x-gateway-invocation-id': 'spoofed',
          // Act on the gateway's origin, which every tenant shares: never passed to callers.
          'set-cookie': ['a=1', 'b=2'],
          'alt-svc': 'h3=":443"',
          'clear-site-data': '"cookies"',
          'strict-transport-security': 'max-age=63072000',
          'access-control-allow-origin': '*',
          'access-control-allow-credentials': 'true',
          'service-worker-allowed': '/',
        });
        res.end(JSON.stringify({ got: body.toString(), rid: req.headers['x-request-id'] }));
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await stream(token, agentId, 'hello', {
        'x-request-id': 'stream-rid-1',
        'x-gateway-model': 'm-1',
        'content-type': 'text/plain',
      });
      assert.equal(res.statusCode, 201);
      assert.equal(res.headers['x-upstream'], 'yes');
      assert.equal(res.headers['x-hop'], undefined);
      assert.equal(res.headers['cache-control'], 'no-store');
      for (const name of [
        'set-cookie',
        'alt-svc',
        'clear-site-data',
        'strict-transport-security',
        'access-control-allow-origin',
        'access-control-allow-credentials',
        'service-worker-allowed',
      ]) {
        assert.equal(res.headers[name], undefined, name);
      }
      assert.equal(res.headers['x-request-id'], 'stream-rid-1');
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      assert.match(invocationId, /^inv_[0-9a-f-]{36}$/);
      assert.deepEqual(await res.body.json(), { got: 'hello', rid: 'stream-rid-1' });

      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'succeeded');
      assert.equal(row.mode, 'streaming');
      assert.equal(row.upstreamStatus, 201);
      assert.equal(row.model, 'm-1');
      assert.equal(row.requestId, 'stream-rid-1');
      assert.ok(row.latencyMs != null && row.ttftMs != null && row.ttftMs <= row.latencyMs);
      const polled = await call('GET', `/v1/proxy/${agentId}/invocations/${invocationId}`, { token });
      assert.equal(polled.json.status, 'succeeded');
      assert.equal(polled.json.upstream_status, 201);
    } finally {
      await up.close();
    }
  });

  it('never forwards the block-listed caller headers on the streaming path either', async () => {
    const up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await nodeRequest(
        'POST',
        `/v1/proxy/${agentId}/stream`,
        {
          authorization: `Bearer ${token}`,
          cookie: 'c=1',
          'proxy-authorization': 'Basic x',
          'x-payment': 'not-a-payment',
          'x-gateway-model': 'm',
          connection: 'x-hop',
          'x-hop': '1',
          'x-forwarded-for': '10.0.0.1',
          'x-custom': 'kept',
        },
        'b',
      );
      // An unpriced agent ignores X-PAYMENT; the call passes.
      assert.equal(res.status, 200);
      const seen = up.hits[0].headers;
      for (const blocked of [
        'authorization',
        'cookie',
        'proxy-authorization',
        'x-payment',
        'x-gateway-model',
        'x-hop',
        'x-forwarded-for',
      ])
        assert.equal(seen[blocked], undefined, blocked);
      assert.equal(seen['x-custom'], 'kept');
      assert.ok(seen['x-request-id']);
    } finally {
      await up.close();
    }
  });

  it('streams as bytes arrive: the caller has the ids and the first chunk while the upstream still holds the rest', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    // How long the upstream held its first byte after its headers: the ttft must cover it.
    let heldFirstByteMs = 0;
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.flushHeaders();
        const flushedAt = performance.now();
        // The upstream's own think time before its first byte (the streaming row is written
        // only once a byte has come, so there is no event of the gateway's to wait for here).
        await sleep(100);
        heldFirstByteMs = performance.now() - flushedAt;
        res.write('first;');
        await held;
        res.end('rest');
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await stream(token, agentId);
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      assert.match(invocationId, /^inv_/);
      // Headers are here before any upstream body byte; the row is written and running.
      assert.equal((await waitForRow(invocationId, (r) => r.status === 'running')).status, 'running');
      const it = res.body[Symbol.asyncIterator]();
      const first = await it.next();
      assert.equal(Buffer.from(first.value).toString(), 'first;');
      release();
      let rest = '';
      for (let n = await it.next(); !n.done; n = await it.next()) rest += Buffer.from(n.value).toString();
      assert.equal(rest, 'rest');
      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'succeeded');
      // The time to the first body byte, not to the headers.
      assert.ok(
        row.ttftMs! >= Math.floor(heldFirstByteMs) && row.ttftMs! <= row.latencyMs!,
        `ttft ${row.ttftMs} latency ${row.latencyMs}, first byte held ${heldFirstByteMs} ms after the headers`,
      );
    } finally {
      release();
      await up.close();
    }
  });

  it('marks event streams X-Accel-Buffering: no and delivers each event as it is sent', async () => {
    // The upstream sends each event only once the caller has the one before (or, if it never
    // does, after 5 s): delivered as sent, not gathered up at the end.
    let received = '';
    const deliveredBeforeNext: boolean[] = [];
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        for (let i = 0; i < 3; i++) {
          res.write(`data: event-${i}\n\n`);
          if (i < 2)
            deliveredBeforeNext.push(
              await waitFor(() => received.includes(`event-${i}`), { timeoutMs: 5_000 }).then(
                () => true,
                () => false,
              ),
            );
        }
        res.end();
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await stream(token, agentId, '{}', { accept: 'text/event-stream' });
      assert.equal(res.headers['x-accel-buffering'], 'no');
      assert.equal(res.headers['content-type'], 'text/event-stream');
      const arrivals: string[] = [];
      for await (const chunk of res.body) {
        arrivals.push(Buffer.from(chunk).toString());
        received += arrivals[arrivals.length - 1];
      }
      assert.equal(arrivals.join(''), 'data: event-0\n\ndata: event-1\n\ndata: event-2\n\n');
      assert.ok(arrivals.length >= 3, 'events arrived separately');
      assert.deepEqual(deliveredBeforeNext, [true, true], 'each event reached the caller before the next was sent');
    } finally {
      await up.close();
    }
  });

  it('pipes the request body up unchanged, with or without Content-Length', async () => {
    const up = await rawUpstream((req, res) => {
      void readAll(req).then((body) =>
        res.end(
          JSON.stringify({
            len: body.length,
            te: req.headers['transfer-encoding'] ?? null,
            cl: req.headers['content-length'] ?? null,
            sum: body.reduce((a, b) => (a + b) % 65521, 0),
          }),
        ),
      );
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const payload = Buffer.from(Array.from({ length: 3 * 1024 * 1024 }, (_, i) => i % 251));
      const sum = payload.reduce((a, b) => (a + b) % 65521, 0);
      const withLength = await (await stream(token, agentId, payload)).body.json();
      assert.deepEqual(withLength, { len: payload.length, te: null, cl: String(payload.length), sum });
      const chunked = await (
        await stream(token, agentId, Readable.from([payload.subarray(0, 1000), payload.subarray(1000)]))
      ).body.json();
      assert.deepEqual(chunked, { len: payload.length, te: 'chunked', cl: null, sum });
    } finally {
      await up.close();
    }
  });

  it('sends a small body that arrived whole as it is, and streams one that has not: the upstream has the first part before the caller sends the rest', async () => {
    let firstPartSeen!: () => void;
    const seen = new Promise<void>((r) => (firstPartSeen = r));
    const up = await rawUpstream((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        if (Buffer.concat(chunks).toString().startsWith('first-half;')) firstPartSeen();
      });
      req.on('end', () =>
        res.end(JSON.stringify({ body: Buffer.concat(chunks).toString(), cl: req.headers['content-length'] ?? null })),
      );
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      // Whole on arrival (headers and body in one write): forwarded with its length.
      assert.deepEqual(await (await stream(token, agentId, 'small and whole')).body.json(), {
        body: 'small and whole',
        cl: '15',
      });
      // Content-Length declared, but only half sent: the gateway must forward what it has, not
      // wait for the rest (the caller sends the second half only once the upstream saw the first).
      const body = new Readable({ read() {} });
      const pending = stream(token, agentId, body, { 'content-length': String('first-half;second-half'.length) });
      body.push('first-half;');
      await Promise.race([
        seen,
        sleep(5_000).then(() => assert.fail('the upstream never saw the first half before the rest was sent')),
      ]);
      body.push('second-half');
      body.push(null);
      assert.deepEqual(await (await pending).body.json(), { body: 'first-half;second-half', cl: '22' });
    } finally {
      firstPartSeen();
      await up.close();
    }
  });

  it('keeps memory flat: 128 MiB up and 128 MiB down pass with only a few MiB in flight', async function () {
    this.timeout(180_000);
    // Memory that does not grow with body size means bytes in flight stay bounded: what the
    // caller has sent but the upstream has not received (and the reverse) is all the gateway
    // and the sockets between can hold. A buffering proxy would hold all 128 MiB.
    // (bench:proxy reports the gateway process's RSS under 20 such streams.)
    const total = 128 * 1024 * 1024;
    const chunk = Buffer.alloc(64 * 1024, 7);
    let sent = 0;
    let received = 0;
    let upSent = 0;
    let got = 0;
    let maxUp = 0;
    let maxDown = 0;
    const sample = () => {
      maxUp = Math.max(maxUp, sent - received);
      maxDown = Math.max(maxDown, upSent - got);
    };
    const up = await rawUpstream((req, res) => {
      req.on('data', (c: Buffer) => {
        received += c.length;
        sample();
      });
      req.on('end', async () => {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'x-received': String(received) });
        while (upSent < total) {
          const more = res.write(chunk);
          upSent += chunk.length;
          sample();
          if (!more) await once(res, 'drain');
        }
        res.end();
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const body = Readable.from(
        (function* () {
          while (sent < total) {
            sent += chunk.length;
            sample();
            yield chunk;
          }
        })(),
      );
      const res = await stream(token, agentId, body);
      assert.equal(res.headers['x-received'], String(total));
      for await (const c of res.body) {
        got += c.length;
        sample();
      }
      assert.equal(got, total);
      const mib = (n: number) => (n / (1024 * 1024)).toFixed(1);
      assert.ok(maxUp < 32 * 1024 * 1024, `up to ${mib(maxUp)} MiB in flight upwards`);
      assert.ok(maxDown < 32 * 1024 * 1024, `up to ${mib(maxDown)} MiB in flight downwards`);
      if (process.env.TEST_VERBOSE) console.log(`in flight: up ${mib(maxUp)} MiB, down ${mib(maxDown)} MiB`);
    } finally {
      await up.close();
    }
  });

  it('aborts the upstream call when the caller hangs up, and records caller_aborted', async () => {
    let upstreamClosed!: () => void;
    const closed = new Promise<void>((r) => (upstreamClosed = r));
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.on('close', () => upstreamClosed());
        // One event, then the stream stays open until the gateway ends it.
        res.write('data: 0\n\n');
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const ac = new AbortController();
      const res = await stream(token, agentId, '{}', {}, ac.signal);
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      const it = res.body[Symbol.asyncIterator]();
      await it.next();
      ac.abort();
      await Promise.race([
        closed,
        sleep(3000).then(() => assert.fail('upstream connection still open 3 s after the caller left')),
      ]);
      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'failed');
      assert.equal(row.errorClass, 'caller_aborted');
      assert.equal(row.upstreamStatus, 200);
    } finally {
      await up.close();
    }
  });

  it('records an upstream that dies mid-stream as failed, and the caller sees a broken response', async () => {
    let received = '';
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write('partial');
        // Dies once the caller has what was sent.
        await waitFor(() => received === 'partial', { what: 'the caller to receive the first part' });
        res.socket?.destroy();
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await stream(token, agentId);
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      await assert.rejects(async () => {
        for await (const c of res.body) received += Buffer.from(c).toString();
      });
      assert.equal(received, 'partial');
      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'failed');
      assert.equal(row.errorClass, 'stream_interrupted');
      assert.equal(row.upstreamStatus, 200);
    } finally {
      await up.close();
    }
  });

  it('answers 502 for a refused upstream and 504 for a silent one, with coarse bodies', async () => {
    const port = await closedPort();
    const refused = await createAgent(token, { upstream_url: `http://127.0.0.1:${port}/secret-path` });
    const r1 = await stream(token, refused);
    const t1 = await r1.body.text();
    assert.equal(r1.statusCode, 502);
    assert.deepEqual(JSON.parse(t1), { error: 'upstream unreachable' });
    assert.ok(!t1.includes('127.0.0.1') && !t1.includes(String(port)) && !t1.includes('secret'));
    const id1 = String(r1.headers['x-gateway-invocation-id']);
    assert.equal((await waitForRow(id1)).errorClass, 'connect');

    const silent = await rawUpstream(() => undefined);
    try {
      const agentId = await createAgent(token, { upstream_url: silent.url });
      const r2 = await stream(token, agentId);
      assert.equal(r2.statusCode, 504);
      assert.deepEqual(await r2.body.json(), { error: 'upstream timed out' });
      const row = await waitForRow(String(r2.headers['x-gateway-invocation-id']));
      assert.equal(row.status, 'failed');
      assert.equal(row.errorClass, 'timeout');
    } finally {
      await silent.close();
    }
  });

  it('passes the same gate: 404, 422, 429 with Retry-After, 400 for a long model, 402 for a priced agent', async () => {
    const up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
    try {
      assert.equal((await stream(token, 'agt_01890000-0000-7000-8000-000000000000')).statusCode, 404);
      const pending = await createAgent(token, {});
      assert.equal((await stream(token, pending)).statusCode, 422);
      const suspended = await createAgent(token, { upstream_url: up.url });
      await stack().orm.em.fork().nativeUpdate(AgentSchema, { id: suspended }, { suspended: true });
      assert.equal((await stream(token, suspended)).statusCode, 422);

      const limited = await createAgent(token, { upstream_url: up.url, rate_limit_rps: 0.05, rate_limit_burst: 1 });
      const ok = await stream(token, limited);
      assert.equal(ok.statusCode, 200);
      await ok.body.dump();
      const refused = await stream(token, limited);
      assert.equal(refused.statusCode, 429);
      // ceil(time to the next token): 20 s at 0.05/s, less whatever elapsed since the first call.
      const retryAfter = Number(refused.headers['retry-after']);
      assert.ok(retryAfter >= 15 && retryAfter <= 20, String(retryAfter));

      const agentId = await createAgent(token, { upstream_url: up.url });
      assert.equal((await stream(token, agentId, 'x', { 'x-gateway-model': 'm'.repeat(257) })).statusCode, 400);

      const priced = await createAgent(token, {
        upstream_url: up.url,
        pricing: {
          amount: '1000',
          asset: 'USDC',
          network: 'base',
          pay_to: '0x000000000000000000000000000000000000dEaD',
        },
      });
      const challenge = await stream(token, priced);
      assert.equal(challenge.statusCode, 402);
      await challenge.body.dump();
      assert.equal(up.hits.length, 1, 'only the first rate-limited call reached the upstream');
    } finally {
      await up.close();
    }
  });
});
