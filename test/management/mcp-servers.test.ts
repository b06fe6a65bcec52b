// Virtual MCP servers through the management API: create, get, list (paged), patch, delete;
// the member rules that need the tenant's agents (400 naming the member and field), the name's
// uniqueness (409), and another tenant's server behaving as absent (404).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { assertError } from '../support/catalog.ts';
import { createAgent } from '../support/proxy-helpers.ts';

const MCP = { protocol: 'mcp', mcp_transport: 'streamable_http', upstream_url: 'https://mcp.example.com/mcp' };

describe('management: virtual MCP servers', () => {
  let token: string;
  let other: string;
  let weather: string;
  let files: string;
  let plain: string;
  before(async () => {
    token = await stack().token(`tenant-mcps-${randomUUID()}`);
    other = await stack().token(`tenant-mcps-other-${randomUUID()}`);
    weather = await createAgent(token, { ...MCP, name: `Weather Agent ${randomUUID().slice(0, 6)}` });
    files = await createAgent(token, { ...MCP, name: 'files' });
    plain = await createAgent(token, { upstream_url: 'https://api.example.com/' });
  });

  it('creates, reads, lists, patches and deletes a server, with default prefixes and its mcp_url', async () => {
    const name = uniqueName('federation');
    const created = await call('POST', '/v1/mcp-servers', {
      token,
      json: {
        name,
        description: 'all of them',
        members: [{ agent_id: weather }, { agent_id: files, tools: ['read_*'] }],
      },
    });
    assert.equal(created.status, 201, created.text);
    const server = created.json;
    assert.match(server.id, /^mcps_[0-9a-f-]{36}$/);
    assert.equal(server.name, name);
    assert.equal(server.description, 'all of them');
    assert.match(server.members[0].prefix, /^weather_agent_[0-9a-f]{6}$/);
    assert.deepEqual(server.members[1], { agent_id: files, prefix: 'files', tools: ['read_*'] });
    assert.equal(server.mcp_url, `${stack().apiUrl}/v1/mcp-servers/${server.id}/mcp`);

    const read = await call('GET', `/v1/mcp-servers/${server.id}`, { token });
    assert.equal(read.status, 200);
    assert.deepEqual(read.json, server);

    const second = await call('POST', '/v1/mcp-servers', {
      token,
      json: { name: uniqueName('federation'), members: [{ agent_id: files, prefix: 'f' }] },
    });
    assert.equal(second.status, 201, second.text);
    const page1 = await call('GET', '/v1/mcp-servers?limit=1', { token });
    assert.equal(page1.status, 200);
    assert.deepEqual(
      page1.json.data.map((s: { id: string }) => s.id),
      [server.id],
    );
    const page2 = await call('GET', `/v1/mcp-servers?limit=1&cursor=${page1.json.next_cursor}`, { token });
    assert.deepEqual(
      page2.json.data.map((s: { id: string }) => s.id),
      [second.json.id],
    );
    assert.equal(page2.json.next_cursor, null);

    const patched = await call('PATCH', `/v1/mcp-servers/${server.id}`, {
      token,
      json: { description: null, members: [{ agent_id: files, prefix: 'docs' }] },
    });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.json.name, name);
    assert.equal(patched.json.description, null);
    assert.deepEqual(patched.json.members, [{ agent_id: files, prefix: 'docs', tools: null }]);

    assertError(await call('PATCH', `/v1/mcp-servers/${server.id}`, { token, json: { name: second.json.name } }), 409);
    assertError(await call('POST', '/v1/mcp-servers', { token, json: { name, members: [{ agent_id: files }] } }), 409);

    assert.equal((await call('DELETE', `/v1/mcp-servers/${server.id}`, { token })).status, 204);
    assertError(await call('GET', `/v1/mcp-servers/${server.id}`, { token }), 404);
    assertError(await call('DELETE', `/v1/mcp-servers/${server.id}`, { token }), 404);
  });

  it('answers 400 naming the field: no members, a non-MCP agent, an unknown or foreign agent, a duplicate prefix, a bad prefix or pattern', async () => {
    const foreign = await createAgent(other, MCP);
    const cases: [unknown, RegExp][] = [
      [{ name: 'x', members: [] }, /members must not be empty/],
      [{ name: 'x' }, /members/],
      [{ name: 'x', members: [{ agent_id: files }, { agent_id: plain }] }, /members\[1\]\.agent_id .*not an MCP agent/],
      [{ name: 'x', members: [{ agent_id: foreign }] }, /members\[0\]\.agent_id names no agent/],
      [{ name: 'x', members: [{ agent_id: 'agt_nope' }] }, /members\[\]\.agent_id/],
      [
        { name: 'x', members: [{ agent_id: files }, { agent_id: weather, prefix: 'files' }] },
        /members\[1\]\.prefix "files" is already members\[0\]'s/,
      ],
      [{ name: 'x', members: [{ agent_id: files, prefix: '_x' }] }, /members\[\]\.prefix/],
      [{ name: 'x', members: [{ agent_id: files, tools: ['a*b'] }] }, /members\[\]\.tools/],
      [{ name: '', members: [{ agent_id: files }] }, /name/],
      [{ name: 'x', members: [{ agent_id: files, extra: 1 }] }, /unknown field: members\.0\.extra/],
    ];
    for (const [json, message] of cases)
      assertError(await call('POST', '/v1/mcp-servers', { token, json }), 400, message);
  });

  it("treats another tenant's server as absent", async () => {
    const created = await call('POST', '/v1/mcp-servers', {
      token,
      json: { name: uniqueName('mine'), members: [{ agent_id: files }] },
    });
    assert.equal(created.status, 201);
    const id = created.json.id as string;
    assertError(await call('GET', `/v1/mcp-servers/${id}`, { token: other }), 404);
    assertError(await call('PATCH', `/v1/mcp-servers/${id}`, { token: other, json: { name: 'theirs' } }), 404);
    assertError(await call('DELETE', `/v1/mcp-servers/${id}`, { token: other }), 404);
    const listed = await call('GET', '/v1/mcp-servers', { token: other });
    assert.deepEqual(listed.json.data, []);
    assert.equal((await call('GET', `/v1/mcp-servers/${id}`, { token })).status, 200);
  });

  it('serves OAuth protected-resource metadata, and every /v1 401 (MCP endpoints included) points at it', async () => {
    for (const path of [
      '/.well-known/oauth-protected-resource',
      '/.well-known/oauth-protected-resource/v1/mcp-servers/x/mcp',
    ]) {
      const res = await call('GET', path);
      assert.equal(res.status, 200, path);
      assert.equal(res.json.resource, `${stack().apiUrl}/v1`);
      assert.ok(Array.isArray(res.json.authorization_servers));
      assert.ok(Array.isArray(res.json.scopes_supported));
      assert.deepEqual(res.json.bearer_methods_supported, ['header']);
    }
    const expected = `Bearer resource_metadata="${stack().apiUrl}/.well-known/oauth-protected-resource"`;
    for (const [method, path] of [
      ['POST', `/v1/proxy/${files}/stream`],
      ['POST', '/v1/mcp-servers/mcps_x/mcp'],
      ['GET', '/v1/mcp-servers'],
    ]) {
      const res = await call(method, path, { token: 'not-a-token', json: { jsonrpc: '2.0', id: 1, method: 'ping' } });
      assert.equal(res.status, 401, path);
      assert.equal(res.headers['www-authenticate'], expected, path);
    }
  });
});
