// Budgets on every door that speaks JSON-RPC (docs/API.md "Budgets"): an MCP agent's and an A2A
// agent's calls on /v1 are counted and refused like any call (429 naming the budget, the upstream
// never reached), and a virtual MCP server's member call refused by the member's budget reaches
// its MCP client as a JSON-RPC error carrying the 429 and the budget's id.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { startA2aServer } from '../support/a2a-server.ts';

const MCP = { protocol: 'mcp', mcp_transport: 'streamable_http' };

describe('budgets on the MCP, A2A and virtual MCP server doors', function () {
  this.timeout(60_000);
  let token: string;
  before(async () => {
    token = await stack().token(`tenant-budget-doors-${randomUUID()}`);
  });

  async function capOneCall(agentId: string): Promise<string> {
    const res = await call('POST', '/v1/budgets', {
      token,
      json: { name: uniqueName('one'), scope: { agent_id: agentId }, limit: { calls: 1 }, window: 'day', mode: 'hard' },
    });
    assert.equal(res.status, 201, res.text);
    return res.json.id as string;
  }

  const rpc = (agentId: string, body: unknown) =>
    call('POST', `/v1/proxy/${agentId}/stream`, {
      token,
      body: JSON.stringify(body),
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    });

  it("an MCP agent's and an A2A agent's second call is refused before its upstream, naming the budget", async () => {
    const mcp = await startMcpServer();
    const a2a = await startA2aServer();
    try {
      for (const [agentId, upstreamCount, body] of [
        [
          await createAgent(token, { ...MCP, name: uniqueName('mcp'), upstream_url: mcp.url }),
          () => mcp.bodies.length,
          {
            jsonrpc: '2.0',
            id: 1,
            method: 'initialize',
            params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
          },
        ],
        [
          await createAgent(token, { protocol: 'a2a', name: uniqueName('a2a'), upstream_url: a2a.url }),
          () => a2a.bodies.length,
          {
            jsonrpc: '2.0',
            id: 1,
            method: 'message/send',
            params: {
              message: {
                kind: 'message',
                messageId: randomUUID(),
                role: 'user',
                parts: [{ kind: 'text', text: 'echo hi' }],
              },
            },
          },
        ],
      ] as const) {
        const budgetId = await capOneCall(agentId);
        const first = await rpc(agentId, body);
        assert.notEqual(first.status, 429, first.text);
        const reached = upstreamCount();
        const second = await rpc(agentId, body);
        assert.equal(second.status, 429, second.text);
        assert.deepEqual(second.json, { error: 'budget exceeded', budget_id: budgetId });
        assert.equal(upstreamCount(), reached, 'the refused call never reached the upstream');
      }
    } finally {
      await mcp.close();
      await a2a.close();
    }
  });

  it("a virtual MCP server's member call refused by the member's budget is a JSON-RPC error with the 429 and the budget", async () => {
    const upstream = await startMcpServer();
    const client = new Client({ name: 'budget-test', version: '1.0.0' });
    try {
      const member = await createAgent(token, { ...MCP, name: uniqueName('member'), upstream_url: upstream.url });
      const server = await call('POST', '/v1/mcp-servers', {
        token,
        json: { name: uniqueName('fed'), members: [{ agent_id: member, prefix: 'm' }] },
      });
      assert.equal(server.status, 201, server.text);
      const transport = new StreamableHTTPClientTransport(new URL(server.json.mcp_url as string), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      });
      await client.connect(transport);
      assert.ok((await client.listTools()).tools.some((t) => t.name === 'm_echo'));
      // Capped now: the member's session is open, its next call is the budget's only one.
      const budgetId = await capOneCall(member);
      const echoed = await client.callTool({ name: 'm_echo', arguments: { text: 'one' } });
      assert.deepEqual(echoed.content, [{ type: 'text', text: 'echo: one' }]);
      const refused = await client.callTool({ name: 'm_echo', arguments: { text: 'two' } }).then(
        () => assert.fail('the second call was not refused'),
        (err: { code?: number; message: string; data?: unknown }) => err,
      );
      assert.match(refused.message, /budget exceeded/);
      assert.deepEqual(refused.data, { status: 429, budget_id: budgetId });
    } finally {
      await client.close();
      await upstream.close();
    }
  });
});
