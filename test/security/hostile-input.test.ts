// Pathological JSON from a hostile tenant: deeply nested documents, huge arrays and many keys
// on every endpoint that parses JSON (management bodies, agent metadata, policy documents,
// settlement configuration, MCP bodies on the proxy). Each is a 4xx with the v1 contract's `{error}`,
// never a 500, a stack overflow or a stalled process; the gateway answers normally afterwards.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';

const nestedArrays = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const nestedObjects = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

describe('hostile input: pathological JSON', function () {
  this.timeout(120_000);
  let token: string;
  let upstream: TestUpstream;
  let mcpAgent: string;
  let httpAgent: string;

  before(async () => {
    token = await stack().token(`json-${randomUUID()}`);
    upstream = await startUpstream();
    mcpAgent = await createAgent(token, {
      upstream_url: upstream.url,
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
    });
    httpAgent = await createAgent(token, { upstream_url: upstream.url });
  });
  after(() => upstream.close());

  const shapes: Array<[string, (inner: string) => string]> = [
    ['agent metadata', (inner) => `{"name":"n-${randomUUID()}","metadata":{"x":${inner}}}`],
    ['agent body', (inner) => inner],
    [
      'policy rule match',
      (inner) => `{"default":"allow","on_error":"allow","rules":[{"action":"deny","match":${inner}}]}`,
    ],
    ['credential', (inner) => `{"name":"c","auth_type":"none","source":"managed","extra":${inner}}`],
  ];
  const targets: Record<string, [string, string]> = {
    'agent metadata': ['POST', '/v1/agents'],
    'agent body': ['POST', '/v1/agents'],
    'policy rule match': ['PUT', '/v1/policy'],
    credential: ['POST', '/v1/credentials'],
  };

  for (const [name, wrap] of shapes) {
    for (const [kind, inner] of [
      ['100 000-deep arrays', nestedArrays(100_000)],
      ['100 000-deep objects', nestedObjects(100_000)],
      ['a 300-deep object', nestedObjects(300)],
      ['a 200 000-element array', `[${Array.from({ length: 200_000 }, () => '0').join(',')}]`],
      ['50 000 keys', `{${Array.from({ length: 50_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`],
    ] as const) {
      it(`${name}: ${kind} is a 400 with {error}, never a 5xx`, async () => {
        const [method, path] = targets[name];
        const res = await call(method, path, {
          token,
          body: wrap(inner),
          headers: { 'content-type': 'application/json' },
        });
        assert.ok(res.status === 400 || res.status === 413, `${res.status} ${res.text.slice(0, 200)}`);
        assert.equal(typeof res.json?.error, 'string');
      });
    }
  }

  it('MCP bodies: deep nesting in params is a 400 on both endpoints, nothing forwarded', async () => {
    const before = upstream.received.length;
    for (const inner of [nestedArrays(100_000), nestedObjects(100_000), nestedObjects(500)]) {
      const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":${inner}}}`;
      for (const path of [`/v1/proxy/${mcpAgent}`, `/v1/proxy/${mcpAgent}/stream`]) {
        const res = await call('POST', path, { token, body, headers: { 'content-type': 'application/json' } });
        assert.equal(res.status, 400, `${path}: ${res.status} ${res.text.slice(0, 200)}`);
        assert.equal(typeof res.json?.error, 'string');
      }
    }
    assert.equal(upstream.received.length, before);
  });

  it('a 1 000 000-element array: a 413 for a management body (over 1 MiB, refused on its declared length before it is sent), accepted in an MCP request (within 32 MiB)', async () => {
    const million = `[${'0,'.repeat(999_999)}0]`;
    // Only the headers: the answer comes without a byte of the body.
    const { hostname, port } = new URL(stack().apiUrl);
    const early = await new Promise<string>((resolve, reject) => {
      let text = '';
      const socket = connect(Number(port), hostname, () =>
        socket.write(
          `POST /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${million.length + 30}\r\n\r\n`,
        ),
      );
      socket.on('data', (c: Buffer) => {
        text += c.toString();
        if (text.includes('\r\n\r\n')) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.once('error', reject);
      socket.once('close', () => resolve(text));
    });
    assert.match(early, /^HTTP\/1\.1 413 /, early.slice(0, 80));
    const agent = await call('POST', '/v1/agents', {
      token,
      body: `{"name":"n","metadata":{"x":${million}}}`,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(agent.status, 413, agent.text.slice(0, 200));
    assert.equal(typeof agent.json?.error, 'string');
    const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"xs":${million}}}}`;
    const mcp = await call('POST', `/v1/proxy/${mcpAgent}`, {
      token,
      body,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(mcp.status, 202, mcp.text.slice(0, 200));
  });

  it('an http agent forwards any body verbatim, however it nests (the gateway does not parse it)', async () => {
    const res = await call('POST', `/v1/proxy/${httpAgent}`, {
      token,
      body: nestedArrays(100_000),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(res.status, 202);
  });

  it('still answers normally afterwards', async () => {
    assert.equal((await call('GET', '/v1/agents', { token })).status, 200);
    assert.equal((await call('GET', '/readyz')).status, 200);
  });
});
