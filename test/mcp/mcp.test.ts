// A real MCP client (the SDK's Client over streamable HTTP) talks to a real MCP server (the
// SDK's McpServer, stateful, answering over SSE) through the gateway's streaming endpoint.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { startMcpServer } from '../support/mcp-server.ts';

describe('proxy: MCP through the streaming endpoint', () => {
  let token: string;
  let mcp: Awaited<ReturnType<typeof startMcpServer>>;
  before(async () => {
    token = await stack().token(`tenant-mcp-${randomUUID()}`);
    mcp = await startMcpServer();
  });
  after(() => mcp.close());

  it('lets the SDK client initialize, list tools and call them (SSE answers included), with sessions passing both ways', async () => {
    const agentId = await createAgent(token, {
      upstream_url: mcp.url,
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
      mcp_protocol_version: '2025-06-18',
    });
    const client = new Client({ name: 'gateway-test', version: '1.0.0' });
    const logs: string[] = [];
    client.setNotificationHandler(
      (await import('@modelcontextprotocol/sdk/types.js')).LoggingMessageNotificationSchema,
      (n) => void logs.push(String(n.params.data)),
    );
    const transport = new StreamableHTTPClientTransport(new URL(`${stack().apiUrl}/v1/proxy/${agentId}/stream`), {
      requestInit: { headers: { authorization: `Bearer ${token}`, 'x-gateway-model': 'mcp-model' } },
    });
    await client.connect(transport);
    try {
      assert.ok(transport.sessionId, 'the upstream’s Mcp-Session-Id reached the client');
      const tools = await client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['count', 'echo']);
      const echoed = await client.callTool({ name: 'echo', arguments: { text: 'through the gateway' } });
      assert.deepEqual(echoed.content, [{ type: 'text', text: 'echo: through the gateway' }]);
      const counted = await client.callTool({ name: 'count', arguments: { n: 3 } });
      assert.deepEqual(counted.content, [{ type: 'text', text: 'counted to 3' }]);
      assert.deepEqual(logs, ['step 1', 'step 2', 'step 3'], 'notifications streamed through over SSE');
    } finally {
      await client.close();
    }

    // What reached the upstream: the session id and protocol version, never the caller's token.
    const afterInit = mcp.seen.filter((h) => h['mcp-session-id']);
    assert.ok(afterInit.length >= 3);
    for (const headers of mcp.seen) assert.equal(headers.authorization, undefined);
    assert.ok(afterInit.every((h) => h['mcp-session-id'] === transport.sessionId));
    assert.ok(afterInit.some((h) => typeof h['mcp-protocol-version'] === 'string'));

    // Each POST is an invocation with its method, and the tool for tools/call.
    // Streaming rows are written beside the call, not before its first byte: wait for the last.
    type Listed = { invocation_id: string; mcp_method: string; mcp_tool: string | null; status: string; model: string };
    const records = await waitFor(
      async () => {
        const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, { token });
        assert.equal(listed.status, 200);
        const all = (listed.json.data as Listed[]).reverse();
        return all.filter((r) => r.mcp_method === 'tools/call').length >= 2 && all;
      },
      { everyMs: 50, what: 'both tool calls recorded' },
    );
    const methods = records.map((r) => r.mcp_method);
    assert.deepEqual(methods.slice(0, 2), ['initialize', 'notifications/initialized']);
    assert.ok(methods.includes('tools/list'));
    assert.deepEqual(
      records.filter((r) => r.mcp_method === 'tools/call').map((r) => r.mcp_tool),
      ['echo', 'count'],
    );
    for (const r of records) {
      const row = await waitForRow(r.invocation_id);
      assert.equal(row.status, 'succeeded');
      assert.equal(row.model, 'mcp-model');
    }
  });

  it('answers 400 on the streaming endpoint when an MCP body is not one JSON-RPC 2.0 request', async () => {
    const agentId = await createAgent(token, {
      upstream_url: mcp.url,
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
    });
    const before = mcp.seen.length;
    for (const body of [
      '{',
      '[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
      '{"jsonrpc":"2.0","id":1}',
      '"tools/list"',
    ]) {
      const res = await call('POST', `/v1/proxy/${agentId}/stream`, {
        token,
        body,
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(res.status, 400, body);
      assert.ok(res.json.error);
    }
    assert.equal(mcp.seen.length, before, 'nothing was forwarded');
  });
});
