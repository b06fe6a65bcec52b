// What a caller or an upstream can send that the A2A surface must refuse, on the real stack
// (an @a2a-js/sdk server as the upstream, test/support/a2a-server.ts):
// - a task of another tenant named in the protobuf spelling of a field (`task_id`,
//   `reference_task_ids`), which the SDK's server reads as readily as `taskId`;
// - text PostgreSQL's jsonb cannot hold (a lone UTF-16 surrogate) in an agent's
//   public_interface or in an upstream's Agent Card: a 400, not a 500;
// - a tenant's slow upstream card, read on update, holding the database pool every tenant needs;
// - an upstream that compresses its answers when the caller accepts it, hiding the tasks it
//   names from the gateway (which binds them as they pass);
// - a skill named in a request that sends no message, to take that skill's price;
// - Server-Sent Events whose lines end in CR only, which the gateway held back unseen;
// - a member the gateway reads sent in other letter case (`METHOD`, `Skill`), which an upstream
//   decoding with Go's case-blind encoding/json would read in place of the one the gateway saw.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, rawUpstream, readAll } from '../support/proxy-helpers.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { waitFor } from '../support/wait.ts';
import { newPayTo } from '../support/x402.ts';

const sendMessage = (message: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id: 1,
  method: 'SendMessage',
  params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'echo x' }], ...message } },
});

describe('A2A: what a caller or an upstream cannot make the gateway do', function () {
  this.timeout(60_000);
  let upstream: A2aUpstream;

  before(async () => {
    upstream = await startA2aServer();
  });
  after(() => upstream.close());

  it("refuses another tenant's task named as task_id or reference_task_ids, before the upstream", async () => {
    const token = await stack().token(`tenant-a2a-victim-${randomUUID()}`);
    const agent = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
    const sent = await call('POST', `/v1/proxy/${agent}/stream`, {
      token,
      json: sendMessage({}),
      headers: { 'a2a-version': '1.0' },
    });
    assert.equal(sent.status, 200, sent.text);
    const victimTask = (sent.json.result as { task: { id: string } }).task.id;

    const otherToken = await stack().token(`tenant-a2a-stranger-${randomUUID()}`);
    const otherAgent = await createAgent(otherToken, { protocol: 'a2a', upstream_url: upstream.url });
    const before = upstream.bodies.length;
    for (const message of [{ task_id: victimTask }, { reference_task_ids: [victimTask] }]) {
      const res = await call('POST', `/v1/proxy/${otherAgent}/stream`, {
        token: otherToken,
        json: sendMessage(message),
        headers: { 'a2a-version': '1.0' },
      });
      assert.equal(res.status, 404, `${JSON.stringify(message)}: ${res.text}`);
      assert.deepEqual(res.json, { error: 'task not found through this agent' });
    }
    assert.equal(upstream.bodies.length, before, 'nothing reached the upstream');
  });

  it('answers 400 for a lone surrogate in public_interface or in the upstream card', async () => {
    const token = await stack().token(`tenant-a2a-text-${randomUUID()}`);
    const agent = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
    const patched = await call('PATCH', `/v1/agents/${agent}`, {
      token,
      json: { public_interface: { input_example: { text: 'a\ud800b' } } },
    });
    assert.equal(patched.status, 400, patched.text);

    const odd = await rawUpstream((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"name":"odd","description":"x\\ud800"}');
    }, '/a2a');
    try {
      const created = await call('POST', '/v1/agents', {
        token,
        json: { name: `odd-${randomUUID()}`, protocol: 'a2a', upstream_url: odd.url },
      });
      assert.equal(created.status, 400, created.text);
    } finally {
      await odd.close();
    }
  });

  it("reads an updated agent's card holding no database connection: a slow card starves no other tenant", async () => {
    const held: ServerResponse[] = [];
    let abandoned = 0;
    const slow = await rawUpstream((req, res) => {
      held.push(res);
      res.once('close', () => {
        if (!res.writableEnded) abandoned++;
      });
    }, '/a2a');
    try {
      const token = await stack().token(`tenant-a2a-slow-card-${randomUUID()}`);
      // As many updates as the gateway's pool has connections (gateway/db/orm.ts: 10).
      const agents = await Promise.all(Array.from({ length: 10 }, () => createAgent(token, { protocol: 'a2a' })));
      const updates = agents.map((id) =>
        call('PATCH', `/v1/agents/${id}`, { token, json: { upstream_url: slow.url } }),
      );
      await waitFor(() => held.length === agents.length || null, { what: 'every card read waiting' });

      const other = await stack().token(`tenant-a2a-bystander-${randomUUID()}`);
      const listed = await call('GET', '/v1/agents', { token: other });
      assert.equal(listed.status, 200, listed.text);
      assert.equal(abandoned, 0, 'the other tenant was answered while the cards were still being read');

      const card = JSON.stringify({ name: 'slow', description: 'a slow card', skills: [] });
      for (const res of held) res.writeHead(200, { 'content-type': 'application/json' }).end(card);
      for (const updated of await Promise.all(updates)) assert.equal(updated.status, 200, updated.text);
    } finally {
      for (const res of held) if (!res.writableEnded) res.destroy();
      await slow.close();
    }
  });

  it('binds the tasks of an upstream that compresses when the caller accepts it', async () => {
    // The test upstream behind a front that gzips every answer the request accepts gzipped.
    const origin = new URL(upstream.url).origin;
    const gzipping = await rawUpstream((req, res) => {
      void (async () => {
        const body = req.method === 'POST' ? await readAll(req) : undefined;
        const a2aVersion = req.headers['a2a-version'];
        const reply = await fetch(`${origin}${req.url === '/a2a' ? new URL(upstream.url).pathname : req.url}`, {
          method: req.method,
          headers: { 'content-type': 'application/json', ...(a2aVersion ? { 'a2a-version': String(a2aVersion) } : {}) },
          body,
        });
        const answer = Buffer.from(await reply.arrayBuffer());
        const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
        res.writeHead(reply.status, {
          'content-type': reply.headers.get('content-type') ?? 'application/json',
          ...(gzip ? { 'content-encoding': 'gzip' } : {}),
        });
        res.end(gzip ? gzipSync(answer) : answer);
      })();
    }, '/a2a');
    try {
      const token = await stack().token(`tenant-a2a-gzip-${randomUUID()}`);
      const agent = await createAgent(token, { protocol: 'a2a', upstream_url: gzipping.url });
      const headers = { 'a2a-version': '1.0', 'accept-encoding': 'gzip' };
      const sent = await call('POST', `/v1/proxy/${agent}/stream`, { token, json: sendMessage({}), headers });
      assert.equal(sent.status, 200, sent.text);
      // Asked uncompressed: the gateway watches the answer for its task.
      assert.equal(sent.headers['content-encoding'], undefined);
      const taskId = (sent.json as { result: { task: { id: string } } }).result.task.id;
      const got = await call('POST', `/v1/proxy/${agent}/stream`, {
        token,
        json: { jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: taskId } },
        headers,
      });
      assert.equal(got.status, 200, got.text);
    } finally {
      await gzipping.close();
    }
  });

  it('refuses a member the gateway reads sent again in other letter case, before the upstream', async () => {
    const token = await stack().token(`tenant-a2a-case-${randomUUID()}`);
    const agent = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
    const before = upstream.bodies.length;
    for (const body of [
      { ...sendMessage({}), METHOD: 'GetTask' },
      sendMessage({ metadata: { skill: 'echo', Skill: 'count' } }),
      sendMessage({ TaskId: randomUUID() }),
    ]) {
      const res = await call('POST', `/v1/proxy/${agent}/stream`, {
        token,
        json: body,
        headers: { 'a2a-version': '1.0' },
      });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error, /keys are case-sensitive/);
    }
    assert.equal(upstream.bodies.length, before, 'nothing reached the upstream');
  });

  it("prices a task read at its method's price, whatever skill a message added to it names", async () => {
    const token = await stack().token(`tenant-a2a-skill-price-${randomUUID()}`);
    const agent = await createAgent(token, {
      protocol: 'a2a',
      upstream_url: upstream.url,
      pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: newPayTo(), skills: { echo: '0' } },
    });
    const headers = { 'a2a-version': '1.0' };
    const free = sendMessage({ metadata: { skill: 'echo' } });
    const sent = await call('POST', `/v1/proxy/${agent}/stream`, { token, json: free, headers });
    assert.equal(sent.status, 200, sent.text);
    const taskId = (sent.json as { result: { task: { id: string } } }).result.task.id;
    const read = await call('POST', `/v1/proxy/${agent}/stream`, {
      token,
      json: { jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: taskId, message: free.params.message } },
      headers,
    });
    assert.equal(read.status, 402, read.text);
  });

  it('passes and watches an event stream whose lines end in CR only, each event as it arrives', async () => {
    const taskId = `cr-${randomUUID()}`;
    const event = {
      jsonrpc: '2.0',
      id: 1,
      result: { task: { id: taskId, contextId: 'c', status: { state: 'TASK_STATE_WORKING' } } },
    };
    let stream: ServerResponse | undefined;
    const cr = await rawUpstream((req, res) => {
      if (req.method === 'GET')
        return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"name":"cr","skills":[]}');
      void readAll(req).then((body) => {
        const { method } = JSON.parse(body.toString('utf8')) as { method: string };
        if (method === 'GetTask')
          return void res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ jsonrpc: '2.0', id: 2, result: event.result.task }));
        stream = res;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify(event)}\r\r`);
      });
    }, '/a2a');
    try {
      const token = await stack().token(`tenant-a2a-cr-${randomUUID()}`);
      const agent = await createAgent(token, { protocol: 'a2a', upstream_url: cr.url });
      const res = await request(`${stack().apiUrl}/v1/proxy/${agent}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ...sendMessage({}), method: 'SendStreamingMessage' }),
      });
      assert.equal(res.statusCode, 200);
      // The first event arrives while the upstream's stream is still open.
      let seen = '';
      for await (const chunk of res.body) {
        seen += String(chunk);
        if (seen.includes(taskId)) break;
      }
      const got = await call('POST', `/v1/proxy/${agent}/stream`, {
        token,
        json: { jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: taskId } },
      });
      assert.equal(got.status, 200, got.text);
      res.body.destroy();
    } finally {
      stream?.end();
      await cr.close();
    }
  });
});
