// A virtual MCP server through the unmodified MCP SDK client (Client + StreamableHTTPClientTransport,
// bearer token): its own initialize, the members' tools merged and prefixed, a tool the tenant's
// policy denies this caller neither listed nor called, each member's tool call an invocation of
// that member (through the server), progress and notifications passed through, the session kept
// in the database (continued on another replica), a slow and a failing member, a member removed
// or suspended while a session is open, the member sessions ended with the client's, prompts and
// resources federated, a member's tools/list_changed passed on, and hostile members.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LoggingMessageNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { request } from 'undici';
import { replica } from '../support/replica.ts';
import { stack } from '../support/stack.ts';
import { call, callAt } from '../support/http.ts';
import { closedPort, createAgent, rawUpstream, readAll } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { retentionRun } from '../support/workflows.ts';
import { startMcpServer } from '../support/mcp-server.ts';

const MCP = { protocol: 'mcp', mcp_transport: 'streamable_http' };

type Listed = {
  invocation_id: string;
  status: string;
  mcp_method: string;
  mcp_tool: string | null;
  mcp_server_id: string | null;
};

async function createServer(token: string, members: unknown[]): Promise<{ id: string; mcp_url: string }> {
  const res = await call('POST', '/v1/mcp-servers', { token, json: { name: `fed-${randomUUID()}`, members } });
  assert.equal(res.status, 201, res.text);
  return res.json;
}

/**
 * The SDK client connected; `streamOpen` resolves once the GET stream it opens by itself after
 * initialize is open (its fetch, an option the SDK offers, watches for it).
 */
async function connect(url: string, token: string, sessionId?: string) {
  const client = new Client({ name: 'federation-test', version: '1.0.0' });
  let streamOpened!: () => void;
  const streamOpen = new Promise<void>((resolve) => (streamOpened = resolve));
  const watching: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if ((init?.method ?? 'GET') === 'GET' && res.status === 200) streamOpened();
    return res;
  };
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
    sessionId,
    fetch: watching,
  });
  await client.connect(transport);
  return { client, transport, streamOpen };
}

describe('MCP: virtual MCP servers', () => {
  let token: string;
  let alpha: Awaited<ReturnType<typeof startMcpServer>>;
  let beta: Awaited<ReturnType<typeof startMcpServer>>;
  let slow: Awaited<ReturnType<typeof startMcpServer>>;
  before(async () => {
    token = await stack().token(`tenant-mcps-${randomUUID()}`);
    alpha = await startMcpServer();
    beta = await startMcpServer({ json: true, listDelayMs: 200 });
    slow = await startMcpServer({ listDelayMs: 10_000 });
  });
  after(async () => {
    await Promise.all([alpha.close(), beta.close(), slow.close()]);
  });

  /** Alpha and beta as new agents, members `a` and `b` of a new server. */
  async function alphaAndBeta() {
    const a = await createAgent(token, { ...MCP, name: `a-${randomUUID()}`, upstream_url: alpha.url });
    const b = await createAgent(token, { ...MCP, name: `b-${randomUUID()}`, upstream_url: beta.url });
    const server = await createServer(token, [
      { agent_id: a, prefix: 'a' },
      { agent_id: b, prefix: 'b' },
    ]);
    return { a, b, server };
  }

  it('merges the members’ tools under their prefixes, hides and refuses a denied tool, and records each call as its member’s', async () => {
    const a = await createAgent(token, { ...MCP, name: 'alpha', upstream_url: alpha.url });
    const b = await createAgent(token, { ...MCP, name: 'beta', upstream_url: beta.url });
    const server = await createServer(token, [{ agent_id: a }, { agent_id: b, prefix: 'b' }]);
    const policy = await call('PUT', '/v1/policy', {
      token,
      json: {
        default: 'allow',
        on_error: 'deny',
        rules: [{ action: 'deny', match: { agents: [b], tools: ['count'] } }],
      },
    });
    assert.equal(policy.status, 200, policy.text);

    const { client, transport } = await connect(server.mcp_url, token);
    try {
      assert.equal(client.getServerVersion()?.name.startsWith('fed-'), true, 'the server’s own serverInfo');
      // What it federates, each able to change (its members are not asked at initialize).
      assert.deepEqual(client.getServerCapabilities(), {
        tools: { listChanged: true },
        prompts: { listChanged: true },
        resources: { listChanged: true },
      });
      assert.ok(transport.sessionId);
      const tools = await client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['alpha_count', 'alpha_echo', 'b_echo']);
      const echo = tools.tools.find((t) => t.name === 'b_echo')!;
      assert.equal(echo.description, 'Echoes its text');
      assert.deepEqual(Object.keys(echo.inputSchema.properties ?? {}), ['text']);

      const fromA = await client.callTool({ name: 'alpha_echo', arguments: { text: 'one' } });
      assert.deepEqual(fromA.content, [{ type: 'text', text: 'echo: one' }]);
      const fromB = await client.callTool({ name: 'b_echo', arguments: { text: 'two' } });
      assert.deepEqual(fromB.content, [{ type: 'text', text: 'echo: two' }]);

      // Denied by policy: not listed, and refused with a JSON-RPC error, never reaching the member.
      const countsBefore = beta.bodies.filter((m) => (m as { method?: string }).method === 'tools/call').length;
      await assert.rejects(client.callTool({ name: 'b_count', arguments: { n: 1 } }), /denied by policy/);
      assert.equal(beta.bodies.filter((m) => (m as { method?: string }).method === 'tools/call').length, countsBefore);
      await assert.rejects(client.callTool({ name: 'nobody_echo', arguments: {} }), /unknown tool/);

      // Notifications and progress pass through as the member sends them.
      const logs: string[] = [];
      client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.push(String(n.params.data)));
      const progress: number[] = [];
      const counted = await client.callTool({ name: 'alpha_count', arguments: { n: 3 } }, undefined, {
        onprogress: (p) => void progress.push(p.progress),
      });
      assert.deepEqual(counted.content, [{ type: 'text', text: 'counted to 3' }]);
      assert.deepEqual(logs, ['step 1', 'step 2', 'step 3']);
      assert.deepEqual(progress, [1, 2, 3]);

      // The session lives in the database: another replica continues it.
      const other = await replica();
      try {
        const url = server.mcp_url.replace(stack().apiUrl, other.url);
        const continued = await connect(url, token, transport.sessionId);
        const again = await continued.client.callTool({ name: 'b_echo', arguments: { text: 'three' } });
        assert.deepEqual(again.content, [{ type: 'text', text: 'echo: three' }]);
      } finally {
        await other.close();
      }
    } finally {
      await transport.terminateSession();
      await client.close();
    }

    // Each call is an invocation of its member, through the server, under the member's own tool name.
    for (const [agentId, tools] of [
      [a, ['echo', 'count']],
      [b, ['echo', 'echo']],
    ] as const) {
      const rows = await waitFor(
        async () => {
          const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, { token });
          const calls = (listed.json.data as Listed[]).filter((r) => r.mcp_method === 'tools/call').reverse();
          return calls.length >= tools.length && calls;
        },
        { everyMs: 50, what: 'the member’s calls recorded' },
      );
      assert.deepEqual(
        rows.map((r) => r.mcp_tool),
        tools,
      );
      for (const row of rows) assert.equal(row.mcp_server_id, server.id);
      // Served in memory, each answered whole: none recorded as cut short by its caller.
      await waitFor(
        async () => {
          const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, { token });
          const calls = (listed.json.data as Listed[]).filter((r) => r.mcp_method === 'tools/call');
          return calls.every((r) => r.status === 'succeeded');
        },
        { everyMs: 50, what: 'the member’s calls completed' },
      );
    }
    await call('DELETE', '/v1/policy', { token });
  });

  it('lists the members that answer in time, and a failing member’s tool gets the error a direct call gets', async () => {
    const a = await createAgent(token, { ...MCP, name: 'alpha two', upstream_url: alpha.url });
    const s = await createAgent(token, { ...MCP, name: 'slow', upstream_url: slow.url });
    const down = await createAgent(token, {
      ...MCP,
      name: 'down',
      upstream_url: `http://127.0.0.1:${await closedPort()}/mcp`,
    });
    const server = await createServer(token, [{ agent_id: a, prefix: 'alpha' }, { agent_id: s }, { agent_id: down }]);
    const { client, transport } = await connect(server.mcp_url, token);
    try {
      const started = Date.now();
      const tools = await client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['alpha_count', 'alpha_echo']);
      assert.ok(Date.now() - started < 8_000, 'the slow member did not hold the list');
      const direct = await call('POST', `/v1/proxy/${down}/stream`, {
        token,
        json: { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} },
      });
      await assert.rejects(client.callTool({ name: 'down_echo', arguments: { text: 'x' } }), (err: Error) => {
        assert.ok(err.message.includes(direct.json.error), `${err.message} / ${direct.text}`);
        return true;
      });
      const echoed = await client.callTool({ name: 'alpha_echo', arguments: { text: 'still here' } });
      assert.deepEqual(echoed.content, [{ type: 'text', text: 'echo: still here' }]);

      // A member deleted while the session is open: its tools are gone at once.
      assert.equal((await call('DELETE', `/v1/agents/${a}`, { token })).status, 204);
      const after = await client.listTools();
      assert.deepEqual(after.tools, []);
      await assert.rejects(client.callTool({ name: 'alpha_echo', arguments: { text: 'x' } }));
    } finally {
      await transport.terminateSession();
      await client.close();
    }
  });

  it('offers the prompts and resources its members offer, each routed to its member', async () => {
    const one = await startMcpServer({ label: 'one' });
    const two = await startMcpServer({ label: 'two', json: true });
    try {
      const a = await createAgent(token, { ...MCP, name: `one-${randomUUID()}`, upstream_url: one.url });
      const b = await createAgent(token, { ...MCP, name: `two-${randomUUID()}`, upstream_url: two.url });
      const server = await createServer(token, [
        { agent_id: a, prefix: 'one' },
        { agent_id: b, prefix: 'two' },
      ]);
      const { client, transport } = await connect(server.mcp_url, token);
      try {
        assert.deepEqual(client.getServerCapabilities(), {
          tools: { listChanged: true },
          prompts: { listChanged: true },
          resources: { listChanged: true },
        });
        const prompts = await client.listPrompts();
        assert.deepEqual(prompts.prompts.map((p) => p.name).sort(), ['one_greet', 'two_greet']);
        const greeted = await client.getPrompt({ name: 'two_greet', arguments: { name: 'ada' } });
        assert.deepEqual(greeted.messages, [{ role: 'user', content: { type: 'text', text: 'hello ada from two' } }]);
        await assert.rejects(client.getPrompt({ name: 'three_greet', arguments: { name: 'x' } }), /unknown prompt/);

        const resources = await client.listResources();
        assert.deepEqual(resources.resources.map((r) => r.uri).sort(), ['test://one/readme', 'test://two/readme']);
        const read = await client.readResource({ uri: 'test://two/readme' });
        assert.deepEqual(read.contents, [{ uri: 'test://two/readme', text: 'readme of two' }]);
        const readOne = await client.readResource({ uri: 'test://one/readme' });
        assert.deepEqual(readOne.contents, [{ uri: 'test://one/readme', text: 'readme of one' }]);
        await assert.rejects(client.readResource({ uri: 'test://three/readme' }), /resource not found/);
      } finally {
        await transport.terminateSession();
        await client.close();
      }
      // Each reached its own member only, as that member's invocation through the server.
      const reached = (bodies: unknown[], method: string) =>
        bodies.filter((m) => (m as { method?: string }).method === method).length;
      assert.equal(reached(two.bodies, 'prompts/get'), 1);
      assert.equal(reached(one.bodies, 'prompts/get'), 0);
      assert.equal(reached(two.bodies, 'resources/read'), 1);
      assert.equal(reached(one.bodies, 'resources/read'), 1);
      const rows = await waitFor(
        async () => {
          const listed = await call('GET', `/v1/invocations?agent_id=${b}&limit=100`, { token });
          const routed = (listed.json.data as Listed[]).filter((r) =>
            ['prompts/get', 'resources/read'].includes(r.mcp_method),
          );
          return routed.length >= 2 && routed;
        },
        { everyMs: 50, what: 'the routed calls recorded' },
      );
      for (const row of rows) assert.equal(row.mcp_server_id, server.id);
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('passes on a member’s notifications/tools/list_changed, and tells its own list changes on the session’s GET stream', async () => {
    const member = await startMcpServer({ refreshTool: true });
    try {
      const r = await createAgent(token, { ...MCP, name: `refreshing-${randomUUID()}`, upstream_url: member.url });
      const a = await createAgent(token, { ...MCP, name: `joining-${randomUUID()}`, upstream_url: alpha.url });
      const server = await createServer(token, [{ agent_id: r, prefix: 'r' }]);
      // The SDK client opens the GET stream by itself after initialize.
      const { client, transport, streamOpen } = await connect(server.mcp_url, token);
      try {
        let changed = 0;
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => void changed++);
        const refreshed = await client.callTool({ name: 'r_refresh', arguments: {} });
        assert.deepEqual(refreshed.content, [{ type: 'text', text: 'refreshed' }]);
        assert.equal(changed, 1, 'the member’s notification reached the client in the call’s answer');
        await streamOpen;

        // A member added: told on the stream, and the list has its tools.
        const patched = await call('PATCH', `/v1/mcp-servers/${server.id}`, {
          token,
          json: {
            members: [
              { agent_id: r, prefix: 'r' },
              { agent_id: a, prefix: 'a' },
            ],
          },
        });
        assert.equal(patched.status, 200, patched.text);
        await waitFor(() => changed >= 2, { everyMs: 20, what: 'list_changed for the new member' });
        const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();
        assert.deepEqual(await names(), ['a_count', 'a_echo', 'r_count', 'r_echo', 'r_refresh']);

        // A member suspended (on the agent, not the server): told too.
        const before = changed;
        assert.equal((await call('POST', `/v1/agents/${a}/suspend`, { token, json: { reason: 'test' } })).status, 200);
        await waitFor(() => changed > before, { everyMs: 20, what: 'list_changed for the suspended member' });
        assert.deepEqual(await names(), ['r_count', 'r_echo', 'r_refresh']);
      } finally {
        await transport.terminateSession();
        await client.close();
      }
    } finally {
      await member.close();
    }
  });

  it('bounds GET streams: one per session on any replica, ended with the session, and a number per tenant', async () => {
    const tenant = await stack().token(`tenant-mcps-streams-${randomUUID()}`);
    const agentId = await createAgent(tenant, { ...MCP, name: `streamed-${randomUUID()}`, upstream_url: alpha.url });
    const server = await createServer(tenant, [{ agent_id: agentId, prefix: 'm' }]);
    const path = new URL(server.mcp_url).pathname;
    const initialize = async () => {
      const res = await call('POST', path, {
        token: tenant,
        json: {
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
        },
      });
      assert.equal(res.status, 200, res.text);
      return res.headers['mcp-session-id'] as string;
    };
    const open = async (sessionId: string, base = stack().apiUrl) => {
      const res = await request(`${base}${path}`, {
        headers: { authorization: `Bearer ${tenant}`, accept: 'text/event-stream', 'mcp-session-id': sessionId },
      });
      return { status: res.statusCode, ended: res.body.text().catch(() => ''), body: res.body };
    };
    const other = await replica();
    const held: Array<Awaited<ReturnType<typeof open>>> = [];
    try {
      const session = await initialize();
      // A second stream of the session, on another replica, ends the first.
      const first = await open(session);
      assert.equal(first.status, 200);
      const second = await open(session, other.url);
      assert.equal(second.status, 200);
      await first.ended;
      // The session's end ends its stream.
      assert.equal((await call('DELETE', path, { token: tenant, headers: { 'mcp-session-id': session } })).status, 204);
      await second.ended;
      // Without the session, or without accepting the stream: refused.
      assert.equal((await open(session)).status, 404);
      const plain = await request(`${stack().apiUrl}${path}`, {
        headers: {
          authorization: `Bearer ${tenant}`,
          accept: 'application/json',
          'mcp-session-id': await initialize(),
        },
      });
      await plain.body.dump();
      assert.equal(plain.statusCode, 406);

      // Concurrent GETs of one session leave one stream, the one the session's end then ends:
      // every other ends at once (none is left open untracked, past the session and the bound).
      const raced = await initialize();
      const racing = await Promise.all(Array.from({ length: 8 }, () => open(raced)));
      assert.deepEqual(new Set(racing.map((r) => r.status)), new Set([200]));
      let endedCount = 0;
      for (const r of racing) void r.ended.then(() => (endedCount += 1));
      await waitFor(() => endedCount >= 7, { everyMs: 50, what: 'all but one of the racing streams ended' });
      assert.equal((await call('DELETE', path, { token: tenant, headers: { 'mcp-session-id': raced } })).status, 204);
      await waitFor(() => endedCount === 8, { everyMs: 50, what: 'the last racing stream ended with its session' });

      // A tenant holds at most 64 on one replica; one more is a 429, and one ended makes room.
      for (let i = 0; i < 64; i++) held.push(await open(await initialize()));
      assert.deepEqual(new Set(held.map((h) => h.status)), new Set([200]));
      const refused = await open(await initialize());
      assert.equal(refused.status, 429);
      held[0].body.destroy();
      const last = await initialize();
      await waitFor(
        async () => {
          const again = await open(last);
          held.push(again);
          return again.status === 200;
        },
        { everyMs: 50, what: 'room for a stream' },
      );
    } finally {
      for (const h of held) h.body.destroy();
      await other.close();
    }
  });

  it('takes a suspended member’s tools off at once, on every replica, and gives them back once unsuspended', async () => {
    const { a, server } = await alphaAndBeta();
    const other = await replica();
    const { client, transport } = await connect(server.mcp_url, token);
    try {
      const onReplica = await connect(server.mcp_url.replace(stack().apiUrl, other.url), token, transport.sessionId);
      const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name).sort();
      assert.deepEqual(await names(client), ['a_count', 'a_echo', 'b_count', 'b_echo']);
      assert.deepEqual(await names(onReplica.client), ['a_count', 'a_echo', 'b_count', 'b_echo']);

      const suspended = await call('POST', `/v1/agents/${a}/suspend`, { token, json: { reason: 'test' } });
      assert.equal(suspended.status, 200, suspended.text);
      assert.deepEqual(await names(client), ['b_count', 'b_echo']);
      assert.deepEqual(await names(onReplica.client), ['b_count', 'b_echo']);
      await assert.rejects(onReplica.client.callTool({ name: 'a_echo', arguments: { text: 'x' } }), /not invocable/);
      const still = await onReplica.client.callTool({ name: 'b_echo', arguments: { text: 'still' } });
      assert.deepEqual(still.content, [{ type: 'text', text: 'echo: still' }]);

      assert.equal((await call('POST', `/v1/agents/${a}/unsuspend`, { token })).status, 200);
      assert.deepEqual(await names(onReplica.client), ['a_count', 'a_echo', 'b_count', 'b_echo']);
    } finally {
      await transport.terminateSession();
      await client.close();
      await other.close();
    }
  });

  it('a server’s change and a session’s end made on one replica are in force on another at once', async () => {
    const { b, server } = await alphaAndBeta();
    const other = await replica();
    try {
      const { client, transport } = await connect(server.mcp_url, token);
      const onReplica = await connect(server.mcp_url.replace(stack().apiUrl, other.url), token, transport.sessionId);
      const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name).sort();
      assert.deepEqual(await names(onReplica.client), ['a_count', 'a_echo', 'b_count', 'b_echo']);

      // The server's members changed through the main API: the replica lists the new ones.
      const patched = await call('PATCH', `/v1/mcp-servers/${server.id}`, {
        token,
        json: { members: [{ agent_id: b, prefix: 'b', tools: ['echo'] }] },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.deepEqual(await names(onReplica.client), ['b_echo']);
      await assert.rejects(onReplica.client.callTool({ name: 'a_echo', arguments: { text: 'x' } }), /unknown tool/);

      // The session ended through the main API: the replica no longer knows it.
      const sessionId = transport.sessionId!;
      await transport.terminateSession();
      const after = await callAt(other.url, 'POST', new URL(server.mcp_url).pathname, {
        token,
        headers: { 'mcp-session-id': sessionId },
        json: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      });
      assert.equal(after.status, 404, after.text);
      await client.close();
      await onReplica.client.close();

      // The server deleted: gone on the replica too.
      assert.equal((await call('DELETE', `/v1/mcp-servers/${server.id}`, { token })).status, 204);
      const gone = await callAt(other.url, 'POST', new URL(server.mcp_url).pathname, {
        token,
        json: {
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
        },
      });
      assert.equal(gone.status, 404, gone.text);
    } finally {
      await other.close();
    }
  });

  it('ends the member sessions it opened at their upstreams when the client’s session is deleted', async () => {
    const one = await startMcpServer();
    const two = await startMcpServer({ json: true });
    try {
      const a = await createAgent(token, { ...MCP, name: `end-a-${randomUUID()}`, upstream_url: one.url });
      const b = await createAgent(token, { ...MCP, name: `end-b-${randomUUID()}`, upstream_url: two.url });
      const server = await createServer(token, [
        { agent_id: a, prefix: 'a' },
        { agent_id: b, prefix: 'b' },
      ]);
      const { client, transport } = await connect(server.mcp_url, token);
      const sessionsAt = (member: typeof one) =>
        [...new Set(member.seen.map((h) => h['mcp-session-id']).filter((id) => id !== undefined))] as string[];
      try {
        await client.callTool({ name: 'a_echo', arguments: { text: 'one' } });
        await client.callTool({ name: 'b_echo', arguments: { text: 'two' } });
        const [ofOne, ofTwo] = [sessionsAt(one), sessionsAt(two)];
        assert.equal(ofOne.length, 1);
        assert.equal(ofTwo.length, 1);
        assert.deepEqual([one.deleted, two.deleted], [[], []]);
        const ended = transport.sessionId!;
        await transport.terminateSession();
        assert.deepEqual([one.deleted, two.deleted], [ofOne, ofTwo], 'each member session ended at its upstream');
        // The ended session is gone: the client is told to start again.
        const again = await call('POST', new URL(server.mcp_url).pathname, {
          token,
          headers: { 'mcp-session-id': ended },
          json: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
        });
        assert.equal(again.status, 404, again.text);
      } finally {
        await client.close();
      }
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('opens a member’s session only when the session first needs it, and opens again one the member forgot', async () => {
    const one = await startMcpServer();
    const two = await startMcpServer({ json: true });
    const initializes = (bodies: unknown[]) =>
      bodies.filter((b) => (b as { method?: unknown }).method === 'initialize').length;
    try {
      const a = await createAgent(token, { ...MCP, name: `lazy-a-${randomUUID()}`, upstream_url: one.url });
      const b = await createAgent(token, { ...MCP, name: `lazy-b-${randomUUID()}`, upstream_url: two.url });
      const server = await createServer(token, [
        { agent_id: a, prefix: 'a' },
        { agent_id: b, prefix: 'b' },
      ]);
      const { client, transport } = await connect(server.mcp_url, token);
      try {
        assert.deepEqual([initializes(one.bodies), initializes(two.bodies)], [0, 0], 'no member asked at initialize');
        // A call needs its own member only.
        await client.callTool({ name: 'a_echo', arguments: { text: 'one' } });
        assert.deepEqual([initializes(one.bodies), initializes(two.bodies)], [1, 0]);
        // The list needs every member: the other's session is opened now, the first one's reused.
        const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();
        assert.deepEqual(await names(), ['a_count', 'a_echo', 'b_count', 'b_echo']);
        assert.deepEqual([initializes(one.bodies), initializes(two.bodies)], [1, 1]);

        // Both members forget their sessions (as a restart would): each answers 404 in the old one,
        // and the server opens a new one and goes on, the client none the wiser.
        one.forget();
        two.forget();
        const again = await client.callTool({ name: 'a_echo', arguments: { text: 'again' } });
        assert.deepEqual(again.content, [{ type: 'text', text: 'echo: again' }]);
        assert.deepEqual(await names(), ['a_count', 'a_echo', 'b_count', 'b_echo']);
        assert.deepEqual([initializes(one.bodies), initializes(two.bodies)], [2, 2]);
        const echoed = await client.callTool({ name: 'b_echo', arguments: { text: 'kept' } });
        assert.deepEqual(echoed.content, [{ type: 'text', text: 'echo: kept' }]);
        assert.deepEqual([initializes(one.bodies), initializes(two.bodies)], [2, 2], 'the new sessions kept');

        // The session's end closes the member sessions in force (the new ones).
        const latest = (member: typeof one) =>
          member.seen
            .map((h) => h['mcp-session-id'])
            .filter(Boolean)
            .at(-1);
        const [ofOne, ofTwo] = [latest(one), latest(two)];
        await transport.terminateSession();
        assert.deepEqual([one.deleted, two.deleted], [[ofOne], [ofTwo]]);
      } finally {
        await client.close();
      }
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('survives hostile members: invalid JSON-RPC, a huge list, names that collide after prefixing', async () => {
    const invalid = await rawUpstream(async (req, res) => {
      await readAll(req);
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'x' }).end('{"jsonrpc":"2.0",');
    }, '/mcp');
    const huge = await rawUpstream(async (req, res) => {
      const body = JSON.parse((await readAll(req)).toString()) as { id?: number; method: string };
      if (body.id === undefined) return void res.writeHead(202).end();
      const result =
        body.method === 'initialize'
          ? { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'huge', version: '1' } }
          : { tools: Array.from({ length: 5000 }, (_, i) => ({ name: `t${i}`, inputSchema: { type: 'object' } })) };
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    }, '/mcp');
    try {
      const bad = await createAgent(token, { ...MCP, name: 'bad', upstream_url: invalid.url });
      const big = await createAgent(token, { ...MCP, name: 'big', upstream_url: huge.url });
      // Prefixes `x` and `x_echo`: a name starting `x_echo_` is the longer prefix's.
      const a1 = await createAgent(token, { ...MCP, name: 'alpha three', upstream_url: alpha.url });
      const a2 = await createAgent(token, { ...MCP, name: 'alpha four', upstream_url: beta.url });
      const server = await createServer(token, [
        { agent_id: bad },
        { agent_id: big },
        { agent_id: a1, prefix: 'x' },
        { agent_id: a2, prefix: 'x_echo' },
      ]);
      const { client, transport } = await connect(server.mcp_url, token);
      try {
        const tools = await client.listTools();
        // x's `echo` is x_echo; x_echo's `echo` is x_echo_echo; each name routes to one member only.
        assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['x_count', 'x_echo', 'x_echo_count', 'x_echo_echo']);
        const viaLonger = await client.callTool({ name: 'x_echo_echo', arguments: { text: 'long' } });
        assert.deepEqual(viaLonger.content, [{ type: 'text', text: 'echo: long' }]);
      } finally {
        await transport.terminateSession();
        await client.close();
      }
    } finally {
      await invalid.close();
      await huge.close();
    }
  });
});

describe('MCP: virtual MCP server sessions expire with MCP_SERVER_SESSION_RETENTION_DAYS', function () {
  this.timeout(60_000);

  it('purges the sessions unused before the cutoff, in bounded batches; one in use is marked used', async () => {
    const token = await stack().token(`tenant-mcps-retention-${randomUUID()}`);
    const member = await startMcpServer();
    try {
      const agentId = await createAgent(token, { ...MCP, name: `kept-${randomUUID()}`, upstream_url: member.url });
      const server = await createServer(token, [{ agent_id: agentId, prefix: 'm' }]);
      const [old, used, recent] = [
        await connect(server.mcp_url, token),
        await connect(server.mcp_url, token),
        await connect(server.mcp_url, token),
      ];
      // Each client's GET stream is open (opening it marks the session used).
      await Promise.all([old.streamOpen, used.streamOpen, recent.streamOpen]);
      const conn = stack().orm.em.fork().getConnection();
      // Seconds since the session was last marked used; undefined once it is gone.
      const idle = async (id: string) =>
        (
          await conn.execute<Array<{ idle: number }>>(
            'select extract(epoch from now() - used_at)::float8 as idle from mcp_server_sessions where id = ?',
            [id],
          )
        )[0]?.idle;
      await conn.execute(`update mcp_server_sessions set used_at = now() - interval '10 days' where id = ?`, [
        old.transport.sessionId,
      ]);
      // Used again after days: marked used as it is found, so retention keeps it.
      await conn.execute(`update mcp_server_sessions set used_at = now() - interval '10 days' where id = ?`, [
        used.transport.sessionId,
      ]);
      await used.client.listTools();
      assert.ok(Number(await idle(used.transport.sessionId!)) < 60, 'marked used');

      await retentionRun('mcp-session-retention', {
        retentionDays: 365_000,
        mcpSessionRetentionDays: 7,
        batchSize: 1,
        maxBatchesPerRun: 5,
      });
      assert.equal(await idle(old.transport.sessionId!), undefined, 'the unused session is gone');
      await assert.rejects(old.client.listTools(), /session not found|404/);
      const tools = await used.client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['m_count', 'm_echo']);
      const echoed = await recent.client.callTool({ name: 'm_echo', arguments: { text: 'kept' } });
      assert.deepEqual(echoed.content, [{ type: 'text', text: 'echo: kept' }]);
      for (const { client, transport } of [used, recent]) {
        await transport.terminateSession();
        await client.close();
      }
      await old.client.close();
    } finally {
      await member.close();
    }
  });
});
