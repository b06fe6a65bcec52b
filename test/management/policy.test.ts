// Policy: the document's validation and versioning, every rule kind and action through the
// real proxy pipeline, the decision log, the cache across replicas, on_error on a real engine
// failure (the rate window's Redis unreachable) and fail-closed on a real store failure (the
// policies table taken away).
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { waitFor } from '../support/wait.ts';
import { replica } from '../support/replica.ts';
import { closeRedisClients } from '../../gateway/policy/redis.ts';

// The run's own Redis (test/support/stack.ts), read once the stack is up.
const redisUrl = () => stack().redisUrl;
// A port nothing listens on: every Redis command fails, for real.
const BROKEN_REDIS_URL = 'redis://127.0.0.1:1';

let upstream: TestUpstream;
let seq = 0;

async function tenant(prefix = 'pol'): Promise<{ name: string; token: string; user2: string }> {
  seq += 1;
  const name = `${prefix}-${process.pid}-${seq}-${Math.random().toString(36).slice(2, 7)}`;
  return { name, token: await stack().token(name, 'alice'), user2: await stack().token(name, 'bob') };
}

async function agent(token: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await call('POST', '/v1/agents', {
    token,
    json: { name: uniqueName('pol'), upstream_url: upstream.url, ...extra },
  });
  assert.equal(res.status, 201, res.text);
  return res.json.id;
}

const mcpAgent = (token: string) =>
  agent(token, { protocol: 'mcp', mcp_transport: 'streamable_http', mcp_protocol_version: '2025-06-18' });

const toolCall = (tool: string, marker = 'x') =>
  JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: { marker } } });

async function putPolicy(token: string, doc: unknown, base?: string): Promise<any> {
  const res = base
    ? await callAt(base, 'PUT', '/v1/policy', token, JSON.stringify(doc), 'application/json')
    : await call('PUT', '/v1/policy', { token, json: doc });
  assert.equal(res.status, 200, res.text);
  return res.json;
}

async function invoke(token: string, agentId: string, body = 'hello', headers: Record<string, string> = {}) {
  return call('POST', `/v1/proxy/${agentId}`, {
    token,
    body,
    headers: { 'content-type': 'application/json', ...headers },
  });
}

async function callAt(
  base: string,
  method: string,
  path: string,
  token: string,
  body?: string,
  contentType = 'text/plain',
) {
  const res = await request(`${base}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': contentType } : {}) },
    body,
  });
  const text = await res.body.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, text, json };
}

async function decisions(token: string, query = ''): Promise<any> {
  const res = await call('GET', `/v1/policy/decisions${query}`, { token });
  assert.equal(res.status, 200, res.text);
  return res.json;
}

describe('policy', () => {
  before(async () => {
    upstream = await startUpstream();
  });
  after(async () => {
    await upstream.close();
    // Only the connections this file opened: the stack's own (if configured) stays up.
    await closeRedisClients([redisUrl(), BROKEN_REDIS_URL]);
  });

  describe('document', () => {
    it('rejects malformed documents with 400 and never stores them', async () => {
      const t = await tenant();
      const bad: unknown[] = [
        {},
        { default: 'allow' },
        { on_error: 'deny' },
        { default: 'block', on_error: 'deny', rules: [] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'reject', match: {} }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { max_body_bytes: -1 } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { max_body_bytes: 1.5 } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { rate_per_min: -3 } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { rate_per_min: 2.5 } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { rate_per_min: '10' } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['read_**'] } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['*_file'] } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['re*ad'] } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: [''] } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { agents: 'agt_x' } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { max_body_byte: 10 } }] },
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: {}, extra: true }] },
        { default: 'allow', on_error: 'deny', rules: [], version: 3 },
        { default: 'allow', on_error: 'deny', rules: {} },
        [],
      ];
      for (const doc of bad) {
        const res = await call('PUT', '/v1/policy', { token: t.token, json: doc });
        assert.equal(res.status, 400, `expected 400 for ${JSON.stringify(doc)}, got ${res.status}`);
        assert.equal(typeof res.json.error, 'string');
        assert.deepEqual(Object.keys(res.json), ['error']);
      }
      const notJson = await call('PUT', '/v1/policy', {
        token: t.token,
        body: '{"default":',
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(notJson.status, 400);
      assert.equal((await call('GET', '/v1/policy', { token: t.token })).status, 404);

      await putPolicy(t.token, { default: 'allow', on_error: 'deny', rules: [] });
      assert.equal((await call('PUT', '/v1/policy', { token: t.token, json: { default: 'allow' } })).status, 400);
      const current = await call('GET', '/v1/policy', { token: t.token });
      assert.equal(current.json.version, 1, 'a rejected replace leaves the version alone');
    });

    it('replaces wholesale, counts versions by one and reads back what was stored', async () => {
      const t = await tenant();
      assert.equal((await call('GET', '/v1/policy', { token: t.token })).status, 404);
      const doc1 = {
        default: 'warn',
        on_error: 'deny',
        rules: [
          {
            action: 'deny',
            match: { agents: ['agt_a'], tools: ['read_*', 'write'], max_body_bytes: 1024, rate_per_min: 60 },
          },
          { action: 'allow', match: {} },
        ],
      };
      const first = await putPolicy(t.token, doc1);
      assert.deepEqual(Object.keys(first).sort(), ['updated_at', 'version']);
      assert.equal(first.version, 1);
      assert.ok(!Number.isNaN(Date.parse(first.updated_at)));
      const read1 = await call('GET', '/v1/policy', { token: t.token });
      assert.equal(read1.status, 200);
      assert.deepEqual(read1.json, { ...doc1, version: 1, updated_at: first.updated_at });

      // Not a patch: the empty rule list replaces the two rules, and default changes.
      const second = await putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [] });
      assert.equal(second.version, 2);
      const read2 = await call('GET', '/v1/policy', { token: t.token });
      assert.deepEqual(read2.json, {
        default: 'allow',
        on_error: 'allow',
        rules: [],
        version: 2,
        updated_at: second.updated_at,
      });
      assert.equal((await putPolicy(t.token, { default: 'deny', on_error: 'deny' })).version, 3);
      assert.deepEqual((await call('GET', '/v1/policy', { token: t.token })).json.rules, []);

      // Concurrent replaces each get their own version.
      const versions = await Promise.all(
        Array.from({ length: 5 }, () => putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [] })),
      );
      assert.deepEqual(
        versions.map((v) => v.version).sort((a, b) => a - b),
        [4, 5, 6, 7, 8],
      );

      // Another tenant sees none of it.
      const other = await tenant();
      assert.equal((await call('GET', '/v1/policy', { token: other.token })).status, 404);
    });

    it('DELETE returns the tenant to no policy: calls pass unrecorded, and versions keep counting', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      assert.equal((await call('DELETE', '/v1/policy', { token: t.token })).status, 404, 'nothing to remove');
      await putPolicy(t.token, { default: 'deny', on_error: 'deny' });
      await putPolicy(t.token, { default: 'deny', on_error: 'deny' });
      assert.equal((await invoke(t.token, a)).status, 403);
      const other = await tenant();
      await putPolicy(other.token, { default: 'deny', on_error: 'deny' });

      const removed = await call('DELETE', '/v1/policy', { token: t.token });
      assert.equal(removed.status, 204);
      assert.equal(removed.text, '');
      assert.equal((await call('GET', '/v1/policy', { token: t.token })).status, 404);
      assert.equal((await call('DELETE', '/v1/policy', { token: t.token })).status, 404, 'already removed');
      const before = (await decisions(t.token)).data.length;
      assert.equal((await invoke(t.token, a)).status, 202, 'in force at once: the call passes unchanged');
      assert.equal((await decisions(t.token)).data.length, before, 'and no decision is recorded');
      assert.equal((await call('GET', '/v1/policy', { token: other.token })).status, 200, "another tenant's stays");

      // Replacing again continues the count: version 3 was the removal.
      assert.equal((await putPolicy(t.token, { default: 'deny', on_error: 'deny' })).version, 4);
      assert.equal((await invoke(t.token, a)).status, 403);
    });

    it('requires a token', async () => {
      assert.equal(
        (await call('PUT', '/v1/policy', { json: { default: 'allow', on_error: 'allow', rules: [] } })).status,
        401,
      );
      assert.equal((await call('GET', '/v1/policy/decisions')).status, 401);
      assert.equal((await call('DELETE', '/v1/policy')).status, 401);
    });
  });

  describe('evaluation', () => {
    it('passes calls unchanged and records nothing when the tenant has no policy', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const res = await invoke(t.token, a);
      assert.equal(res.status, 202);
      assert.equal(res.headers['x-gateway-policy-warning'], undefined);
      assert.deepEqual((await decisions(t.token)).data, []);
    });

    it('agents: denies the listed agent with 403, never forwarding; others fall to default', async () => {
      const t = await tenant();
      const blocked = await agent(t.token);
      const free = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { agents: [blocked] } }],
      });
      const marker = `deny-marker-${Date.now()}`;
      const denied = await invoke(t.token, blocked, marker);
      assert.equal(denied.status, 403);
      assert.deepEqual(Object.keys(denied.json), ['error']);
      assert.equal(denied.headers['x-gateway-invocation-id'], undefined);
      assert.ok(
        !upstream.received.some((r) => r.body.toString().includes(marker)),
        'a denied call never reaches the upstream',
      );
      const accepted = await invoke(t.token, free);
      assert.equal(accepted.status, 202);

      const { data } = await decisions(t.token);
      assert.equal(data.length, 2);
      const [allowed, deny] = data;
      assert.equal(allowed.agent_id, free);
      assert.equal(allowed.action, 'allow');
      assert.equal(allowed.matched_rule, '');
      assert.equal(
        allowed.invocation_id,
        accepted.json.invocation_id,
        'a decision names the invocation it let through',
      );
      assert.equal(deny.invocation_id, null, 'a denied call never becomes an invocation');
      assert.equal(deny.agent_id, blocked);
      assert.equal(deny.action, 'deny');
      assert.equal(deny.matched_rule, '1');
      assert.equal(deny.protocol, 'http');
      assert.equal(deny.mcp_tool, null);
      assert.match(deny.id, /^pdec_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.ok(!Number.isNaN(Date.parse(deny.created_at)));
      assert.deepEqual(Object.keys(deny).sort(), [
        'action',
        'agent_id',
        'created_at',
        'id',
        'invocation_id',
        'matched_rule',
        'mcp_tool',
        'protocol',
        'reason',
      ]);
      assert.ok(deny.reason.length > 0);
      assert.ok(!JSON.stringify(data).includes(marker), 'decisions never hold call content');
    });

    it('tools: exact names and one trailing wildcard on MCP calls; never an http call', async () => {
      const t = await tenant();
      const mcp = await mcpAgent(t.token);
      const http = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [
          { action: 'deny', match: { tools: ['delete_everything', 'write_*'] } },
          { action: 'warn', match: { tools: ['*'] } },
        ],
      });
      assert.equal((await invoke(t.token, mcp, toolCall('delete_everything'))).status, 403);
      assert.equal((await invoke(t.token, mcp, toolCall('write_file'))).status, 403);
      assert.equal(
        (await invoke(t.token, mcp, toolCall('write_'))).status,
        403,
        'the wildcard matches the empty suffix',
      );
      const near = await invoke(t.token, mcp, toolCall('delete_everything_else'));
      assert.equal(near.status, 202, 'an exact pattern is not a prefix');
      assert.equal(near.headers['x-gateway-policy-warning'], 'rule 2 matched');
      const list = await invoke(t.token, mcp, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }));
      assert.equal(list.status, 202);
      assert.equal(list.headers['x-gateway-policy-warning'], undefined, 'a method without a tool matches no tool rule');
      const plain = await invoke(t.token, http, toolCall('delete_everything'));
      assert.equal(plain.status, 202, 'a tool rule never matches protocol=http, whatever its body says');
      assert.equal(plain.headers['x-gateway-policy-warning'], undefined);

      const { data } = await decisions(t.token);
      assert.deepEqual(data.map((d: any) => [d.protocol, d.mcp_tool, d.action, d.matched_rule]).reverse(), [
        ['mcp', 'delete_everything', 'deny', '1'],
        ['mcp', 'write_file', 'deny', '1'],
        ['mcp', 'write_', 'deny', '1'],
        ['mcp', 'delete_everything_else', 'warn', '2'],
        ['mcp', null, 'allow', ''],
        ['http', null, 'allow', ''],
      ]);
    });

    it('max_body_bytes: matches a body of at least that size', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { max_body_bytes: 100 } }],
      });
      assert.equal((await invoke(t.token, a, 'x'.repeat(99))).status, 202);
      assert.equal((await invoke(t.token, a, 'x'.repeat(100))).status, 403);
      assert.equal((await invoke(t.token, a, 'x'.repeat(5000))).status, 403);
      assert.equal((await invoke(t.token, a, '')).status, 202);
    });

    it('rate_per_min: matches once the caller (tenant + user) exceeds the rate over the last minute', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const b = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { rate_per_min: 3 } }],
      });
      // The rate is the caller's, across agents: 3 calls pass, the 4th exceeds 3 a minute.
      assert.equal((await invoke(t.token, a)).status, 202);
      assert.equal((await invoke(t.token, b)).status, 202);
      assert.equal((await invoke(t.token, a)).status, 202);
      assert.equal((await invoke(t.token, b)).status, 403);
      assert.equal((await invoke(t.token, a)).status, 403);
      // Another user of the same tenant is another caller.
      assert.equal((await invoke(t.user2, a)).status, 202);
      const { data } = await decisions(t.token);
      assert.deepEqual(data.map((d: any) => d.action).reverse(), ['allow', 'allow', 'allow', 'deny', 'deny', 'allow']);
    });

    it('rules are tried in order, the first match wins, every field of a match must hold, and default applies otherwise', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const b = await agent(t.token);
      await putPolicy(t.token, {
        default: 'deny',
        on_error: 'allow',
        rules: [
          { action: 'warn', match: { agents: [a], max_body_bytes: 10 } },
          { action: 'allow', match: { agents: [a] } },
          { action: 'deny', match: { agents: [a] } },
        ],
      });
      const big = await invoke(t.token, a, 'x'.repeat(20));
      assert.equal(big.status, 202);
      assert.equal(big.headers['x-gateway-policy-warning'], 'rule 1 matched');
      const small = await invoke(t.token, a, 'x');
      assert.equal(small.status, 202);
      assert.equal(small.headers['x-gateway-policy-warning'], undefined, 'rule 1 needs both fields; rule 2 allows');
      assert.equal((await invoke(t.token, b)).status, 403, 'no rule matches b: default deny');
      const { data } = await decisions(t.token);
      assert.deepEqual(data.map((d: any) => [d.action, d.matched_rule]).reverse(), [
        ['warn', '1'],
        ['allow', '2'],
        ['deny', ''],
      ]);
      // An absent or empty field matches anything.
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { agents: [], tools: [] } }],
      });
      assert.equal((await invoke(t.token, b)).status, 403);
      await putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [{ action: 'warn' }] });
      assert.equal((await invoke(t.token, b)).headers['x-gateway-policy-warning'], 'rule 1 matched');
    });

    it('warn forwards the call and sets X-Gateway-Policy-Warning on the transactional answer', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      await putPolicy(t.token, { default: 'warn', on_error: 'deny', rules: [] });
      const marker = `warn-marker-${Date.now()}`;
      const res = await invoke(t.token, a, marker);
      assert.equal(res.status, 202);
      assert.equal(res.headers['x-gateway-policy-warning'], 'no rule matched');
      await waitFor(() => upstream.received.some((r) => r.body.toString() === marker), {
        timeoutMs: 5_000,
        what: 'the warned call to be forwarded',
      });
      const [d] = (await decisions(t.token)).data;
      assert.equal(d.action, 'warn');
      assert.equal(d.matched_rule, '');
    });

    it('streaming: max_body_bytes reads Content-Length, and a chunked request without one always matches', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [
          { action: 'deny', match: { max_body_bytes: 1_000_000 } },
          { action: 'warn', match: {} },
        ],
      });
      const url = `${stack().apiUrl}/v1/proxy/${a}/stream`;
      const sized = await request(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.token}`, 'content-type': 'text/plain' },
        body: 'small',
      });
      await sized.body.text();
      assert.equal(sized.statusCode, 200, 'a small declared body is allowed through');
      assert.equal(sized.headers['x-gateway-policy-warning'], 'rule 2 matched');
      async function* chunks() {
        yield Buffer.from('small but ');
        yield Buffer.from('undeclared');
      }
      const chunked = await request(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.token}`, 'content-type': 'text/plain' },
        body: Readable.from(chunks()),
      });
      const text = await chunked.body.text();
      assert.equal(chunked.statusCode, 403, text);
      assert.ok(!upstream.received.some((r) => r.body.toString() === 'small but undeclared'), 'never forwarded');
    });

    it('deny comes before the payment gate: a denied priced call is 403, never a 402 challenge', async () => {
      const t = await tenant();
      const priced = await agent(t.token, {
        pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: '0x' + '11'.repeat(20) },
      });
      const unpriced = await agent(t.token);
      assert.equal((await invoke(t.token, priced)).status, 402, 'without a policy the priced agent asks to pay');
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { agents: [priced] } }],
      });
      const denied = await invoke(t.token, priced);
      assert.equal(denied.status, 403);
      assert.equal(denied.json.accepts, undefined);
      assert.equal((await invoke(t.token, unpriced)).status, 202);
    });
  });

  describe('decisions', () => {
    it('pages newest first with limit defaulting to 20 and clamped to [1, 100], tenant-scoped', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      await putPolicy(t.token, {
        default: 'allow',
        on_error: 'allow',
        rules: [{ action: 'deny', match: { max_body_bytes: 1000 } }],
      });
      // 105 decisions straight into the log through the proxy would be slow; 25 calls make the paging visible.
      for (let i = 0; i < 25; i++) await invoke(t.token, a, i % 2 === 0 ? 'small' : 'x'.repeat(1000));
      const page = await decisions(t.token);
      assert.equal(page.limit, 20);
      assert.equal(page.data.length, 20);
      const times = page.data.map((d: any) => Date.parse(d.created_at));
      assert.deepEqual(
        [...times].sort((x, y) => y - x),
        times,
        'newest first',
      );
      assert.equal(page.data[0].action, 'allow', 'the last call (i = 24, small) is first');
      assert.equal(page.data[1].action, 'deny');
      assert.deepEqual(await decisions(t.token, '?limit=5').then((p) => [p.limit, p.data.length]), [5, 5]);
      assert.deepEqual(await decisions(t.token, '?limit=0').then((p) => [p.limit, p.data.length]), [1, 1]);
      assert.deepEqual(await decisions(t.token, '?limit=-7').then((p) => [p.limit, p.data.length]), [1, 1]);
      assert.deepEqual(await decisions(t.token, '?limit=1000').then((p) => [p.limit, p.data.length]), [100, 25]);
      assert.deepEqual(await decisions(t.token, '?limit=100').then((p) => [p.limit, p.data.length]), [100, 25]);
      assert.deepEqual(await decisions(t.token, '?limit=abc').then((p) => [p.limit, p.data.length]), [20, 20]);
      assert.deepEqual(await decisions(t.token, '?limit=3.9').then((p) => p.limit), 3);
      const five = (await decisions(t.token, '?limit=5')).data;
      assert.deepEqual(five, page.data.slice(0, 5));

      const other = await tenant();
      assert.deepEqual(await decisions(other.token), { data: [], limit: 20 });
    });

    it('since/until narrow the page, inclusive, with the one timestamp reading of every endpoint', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      await putPolicy(t.token, { default: 'allow', on_error: 'allow' });
      for (let i = 0; i < 3; i++) {
        await invoke(t.token, a);
        // Three distinct milliseconds: the next call only once the clock has moved on.
        const at = Date.now();
        await waitFor(() => Date.now() > at, { everyMs: 1, what: 'the next millisecond' });
      }
      const all = (await decisions(t.token)).data;
      assert.equal(all.length, 3);
      const [newest, middle, oldest] = all.map((d: any) => d.created_at as string);
      const ids = (query: string) => decisions(t.token, query).then((p) => p.data.map((d: any) => d.created_at));
      assert.deepEqual(await ids(`?since=${middle}&until=${middle}`), [middle], 'both bounds inclusive');
      assert.deepEqual(await ids(`?since=${middle}`), [newest, middle]);
      assert.deepEqual(await ids(`?until=${middle}`), [middle, oldest]);
      // The same instant as +00:00 with the + unencoded (it arrives as a space), encoded, and as +02:00.
      const plus = middle.replace('Z', '+00:00');
      const east = new Date(Date.parse(middle) + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
      for (const since of [plus, encodeURIComponent(plus), east, east.replace('T', '%20')])
        assert.deepEqual(await ids(`?since=${since}&until=${plus}`), [middle], since);
      for (const bad of ['since=yesterday', 'until=2026-02-30T00:00:00Z', `since=${newest}&until=${oldest}`]) {
        const res = await call('GET', `/v1/policy/decisions?${bad}`, { token: t.token });
        assert.equal(res.status, 400, bad);
        assert.deepEqual(Object.keys(res.json), ['error']);
      }
    });
  });

  describe('replicas, failures', () => {
    it('a replace is in force for the next call on every replica', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const b = await replica();
      try {
        await putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [] });
        assert.equal(
          (await callAt(b.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status,
          202,
          'replica b caches version 1',
        );
        await putPolicy(t.token, { default: 'deny', on_error: 'allow', rules: [] });
        assert.equal(
          (await callAt(b.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status,
          403,
          'version 2 written through replica a is in force on b',
        );
        await putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [] }, b.url);
        assert.equal((await invoke(t.token, a)).status, 202, 'and the other way round');
      } finally {
        await b.close();
      }
    });

    it('shares the caller rate through Redis across replicas', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const r1 = await replica({ redisUrl: redisUrl() });
      const r2 = await replica({ redisUrl: redisUrl() });
      try {
        await putPolicy(t.token, {
          default: 'allow',
          on_error: 'deny',
          rules: [{ action: 'deny', match: { rate_per_min: 2 } }],
        });
        assert.equal((await callAt(r1.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status, 202);
        assert.equal((await callAt(r2.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status, 202);
        assert.equal(
          (await callAt(r1.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status,
          403,
          'the third call of the minute, whichever replica it reaches',
        );
        assert.equal((await callAt(r2.url, 'POST', `/v1/proxy/${a}`, t.token, 'x')).status, 403);
      } finally {
        await r1.close();
        await r2.close();
      }
    });

    it('on_error decides when the engine fails (the rate window unreachable), and only rules that need it are affected', async () => {
      const t = await tenant();
      const a = await agent(t.token);
      const b = await agent(t.token);
      const broken = await replica({ redisUrl: BROKEN_REDIS_URL });
      try {
        await putPolicy(t.token, {
          default: 'allow',
          on_error: 'deny',
          rules: [
            { action: 'allow', match: { agents: [b] } },
            { action: 'warn', match: { rate_per_min: 1000 } },
          ],
        });
        const failed = await callAt(broken.url, 'POST', `/v1/proxy/${a}`, t.token, 'x');
        assert.equal(failed.status, 403, 'on_error deny');
        assert.equal(
          (await callAt(broken.url, 'POST', `/v1/proxy/${b}`, t.token, 'x')).status,
          202,
          'rule 1 decides before the rate is needed',
        );
        await putPolicy(t.token, {
          default: 'allow',
          on_error: 'warn',
          rules: [{ action: 'deny', match: { rate_per_min: 1000 } }],
        });
        const warned = await callAt(broken.url, 'POST', `/v1/proxy/${a}`, t.token, 'x');
        assert.equal(warned.status, 202);
        assert.equal(warned.headers['x-gateway-policy-warning'], 'policy evaluation failed');
        const { data } = await decisions(t.token);
        assert.deepEqual(
          data
            .slice(0, 3)
            .map((d: any) => [d.action, d.matched_rule, d.reason])
            .reverse(),
          [
            ['deny', '', 'policy evaluation failed'],
            ['allow', '1', 'rule 1 matched'],
            ['warn', '', 'policy evaluation failed'],
          ],
        );
      } finally {
        await broken.close();
      }
    });

    it('fails closed: with the policy store unavailable every proxied call is a 500, whatever on_error says', async () => {
      const t = await tenant();
      const none = await tenant();
      const a = await agent(t.token);
      const c = await agent(none.token);
      await putPolicy(t.token, { default: 'allow', on_error: 'allow', rules: [] });
      assert.equal((await invoke(t.token, a)).status, 202);
      const conn = stack().orm.em.getConnection();
      const marker = `closed-marker-${Date.now()}`;
      // Take the store away for real: the table is gone for every connection until restored.
      await conn.execute('alter table policies rename to policies_unavailable');
      // A change made in SQL is in force as its notification (here the event trigger's `*`)
      // arrives; the test waits for that instead of racing it (GATE_CACHE_FRESHNESS).
      await stack().feed.sync();
      try {
        for (const [token, id] of [
          [t.token, a],
          [none.token, c],
        ]) {
          const res = await invoke(token, id, marker);
          assert.equal(res.status, 500);
          assert.equal(res.text, '', '500 carries no body');
        }
        assert.equal((await call('GET', '/v1/policy', { token: t.token })).status, 500);
      } finally {
        await conn.execute('alter table policies_unavailable rename to policies');
      }
      assert.ok(!upstream.received.some((r) => r.body.toString().includes(marker)), 'nothing was forwarded');
      assert.equal((await invoke(t.token, a)).status, 202, 'back in service once the store is');
    });
  });
});
