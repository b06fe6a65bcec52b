// One MCP endpoint for several MCP agents: creates a virtual MCP server of the given agents
// (POST /v1/mcp-servers), then connects to its `mcp_url` with the MCP TypeScript SDK's own
// client, unmodified (streamable HTTP, the gateway's bearer token as its one extra header),
// lists the merged tools (each `{prefix}_{tool}`), calls one, and ends the session. Each call is
// an invocation of its member agent, recorded with the server's id (docs/API.md, "Virtual MCP
// servers").
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   AGENT_IDS  the member MCP agents, comma-separated, or the arguments
//   TOOL       the tool to call, by its prefixed name (default: the first the server lists)
//   ARGUMENTS  its arguments, a JSON object (default {})
// Run against `npm start` (its demo agent is an MCP server; docs/API.md, "Invocations"):
//   TOOL=demo_echo ARGUMENTS='{"text":"hi"}' npm run example:mcp-federation -- agt_… agt_…
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:mcp-federation -- AGENT_ID [AGENT_ID…]
  Creates a virtual MCP server of these MCP agents and uses it with the MCP SDK's client,
  printing the merged tools and a tool's answer. Settings: GATEWAY_URL, TOKEN, TOOL, ARGUMENTS
  (examples/mcp-federation.ts).`);
const s = gatewaySettings();
const agentIds = process.argv.slice(2).length
  ? process.argv.slice(2)
  : (process.env.AGENT_IDS ?? '').split(',').filter(Boolean);
if (agentIds.length === 0) fail('name the MCP agents: AGENT_IDS=agt_…,agt_… or their ids as arguments', 2);
let args: Record<string, unknown>;
try {
  args = JSON.parse(process.env.ARGUMENTS ?? '{}') as Record<string, unknown>;
} catch {
  fail('ARGUMENTS must be a JSON object', 2);
}

const created = await fetch(`${s.gateway}/v1/mcp-servers`, {
  method: 'POST',
  headers: { authorization: `Bearer ${s.token}`, 'content-type': 'application/json' },
  body: JSON.stringify({
    name: `federation-${Date.now()}`,
    members: agentIds.map((agentId) => ({ agent_id: agentId })),
  }),
}).catch((err: Error) => fail(`${s.gateway}: ${err.message}`));
const server = (await created.json().catch(() => ({}))) as { id?: string; mcp_url?: string; error?: string };
if (created.status !== 201 || !server.mcp_url) fail(`creating the server: ${created.status} ${server.error ?? ''}`);
console.log(`server ${server.id} at ${server.mcp_url}`);

const client = new Client({ name: 'gateway-federation-example', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(server.mcp_url), {
  requestInit: { headers: { authorization: `Bearer ${s.token}` } },
});
try {
  await client.connect(transport);
  console.log(`connected to ${client.getServerVersion()?.name}, session ${transport.sessionId}`);
  const { tools } = await client.listTools();
  console.log(`tools: ${tools.map((t) => t.name).join(', ')}`);
  const tool = process.env.TOOL ?? tools[0]?.name ?? fail('the members list no tools');
  const result = await client.callTool({ name: tool, arguments: args });
  console.log(`${tool} answered${result.isError ? ' with an error' : ''}: ${JSON.stringify(result.content)}`);
  if (result.isError) process.exitCode = 1;
  await transport.terminateSession();
} catch (err) {
  fail(`MCP through ${server.mcp_url}: ${(err as Error).message.split('\n')[0]}`);
} finally {
  await client.close();
}
