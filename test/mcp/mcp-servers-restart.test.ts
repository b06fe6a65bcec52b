// A virtual MCP server's session through a restart of the API process: the unmodified MCP SDK
// client keeps calling with its Mcp-Session-Id while the process it talks to is killed and a new
// one takes its port, and goes on as before: the session and the member session opened for it
// live in PostgreSQL, so the member is not asked to initialize again.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startApiProcess } from '../support/api-process.ts';
import { call } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { stack } from '../support/stack.ts';
import { exited } from '../support/worker-process.ts';

const initializes = (bodies: unknown[]) =>
  bodies.filter((b) => (b as { method?: unknown }).method === 'initialize').length;

describe('MCP: a virtual MCP server’s session through a restart of the API', function () {
  this.timeout(120_000);

  it('continues the same client session on the new process, its member session kept', async () => {
    const token = await stack().token(`tenant-mcps-restart-${randomUUID()}`);
    const member = await startMcpServer();
    let api = await startApiProcess();
    try {
      const agentId = await createAgent(token, {
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        name: `restart-${randomUUID()}`,
        upstream_url: member.url,
      });
      const created = await call('POST', '/v1/mcp-servers', {
        token,
        json: { name: `restart-${randomUUID()}`, members: [{ agent_id: agentId, prefix: 'm' }] },
      });
      assert.equal(created.status, 201, created.text);

      const client = new Client({ name: 'federation-restart-test', version: '1.0.0' });
      const transport = new StreamableHTTPClientTransport(
        new URL(`${api.url}/v1/mcp-servers/${created.json.id as string}/mcp`),
        { requestInit: { headers: { authorization: `Bearer ${token}` } } },
      );
      await client.connect(transport);
      try {
        const before = await client.callTool({ name: 'm_echo', arguments: { text: 'before' } });
        assert.deepEqual(before.content, [{ type: 'text', text: 'echo: before' }]);
        const sessionId = transport.sessionId;
        assert.ok(sessionId);
        assert.equal(initializes(member.bodies), 1, 'one member session opened');

        api.child.kill('SIGKILL');
        await exited(api.child);
        api = await startApiProcess({}, api.port);

        const tools = await client.listTools();
        assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['m_count', 'm_echo']);
        const progress: number[] = [];
        const after = await client.callTool({ name: 'm_count', arguments: { n: 2 } }, undefined, {
          onprogress: (p) => void progress.push(p.progress),
        });
        assert.deepEqual(after.content, [{ type: 'text', text: 'counted to 2' }]);
        assert.deepEqual(progress, [1, 2]);
        assert.equal(transport.sessionId, sessionId, 'the same session');
        assert.equal(initializes(member.bodies), 1, 'the member session continued, not opened again');
      } finally {
        await transport.terminateSession();
        await client.close();
      }
    } finally {
      api.child.kill('SIGKILL');
      await exited(api.child);
      await member.close();
    }
  });
});
