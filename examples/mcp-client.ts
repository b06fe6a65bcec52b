// Calls a tool of an MCP agent through the gateway with the MCP TypeScript SDK's own client,
// unmodified: the client speaks streamable HTTP to the agent's streaming endpoint
// (POST /v1/proxy/{id}/stream), with the gateway's bearer token as its one extra header. The
// gateway passes the MCP session both ways and records each request as an invocation with its
// method and tool; the upstream never sees the token. The agent is an MCP server
// (`"protocol": "mcp", "mcp_transport": "streamable_http"`).
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   AGENT_ID   the MCP agent, or the first argument
//   TOOL       the tool to call (default: the first the server lists)
//   ARGUMENTS  its arguments, a JSON object (default {})
// Run against `npm start`, with an MCP agent of the token's tenant (npm start's demo agent is an
// MCP server at http://127.0.0.1:8099/mcp with one tool, `echo`; docs/API.md, "Invocations"):
//   TOOL=echo ARGUMENTS='{"text":"hi"}' npm run example:mcp-client -- agt_…
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:mcp-client -- AGENT_ID
  Calls a tool of an MCP agent through the gateway with the MCP SDK's client, printing its tools
  and the tool's answer. Settings: GATEWAY_URL, TOKEN, TOOL, ARGUMENTS (examples/mcp-client.ts).`);
const s = gatewaySettings();
const agentId =
  process.argv[2] ??
  process.env.AGENT_ID ??
  fail('name the MCP agent: AGENT_ID=agt_… or its id as the first argument', 2);
let args: Record<string, unknown>;
try {
  args = JSON.parse(process.env.ARGUMENTS ?? '{}') as Record<string, unknown>;
} catch {
  fail('ARGUMENTS must be a JSON object', 2);
}

const client = new Client({ name: 'gateway-example', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(`${s.gateway}/v1/proxy/${agentId}/stream`), {
  requestInit: { headers: { authorization: `Bearer ${s.token}` } },
});
try {
  await client.connect(transport);
  console.log(
    `connected to ${client.getServerVersion()?.name ?? 'the server'}, session ${transport.sessionId ?? 'none'}`,
  );
  const { tools } = await client.listTools();
  console.log(`tools: ${tools.map((t) => t.name).join(', ')}`);
  const tool = process.env.TOOL ?? tools[0]?.name ?? fail('the server lists no tools');
  const result = await client.callTool({ name: tool, arguments: args });
  console.log(`${tool} answered${result.isError ? ' with an error' : ''}: ${JSON.stringify(result.content)}`);
  if (result.isError) process.exitCode = 1;
} catch (err) {
  // The SDK's message for a server that is not MCP is pages of schema errors; its first line says enough.
  fail(`MCP through ${s.gateway}/v1/proxy/${agentId}/stream: ${(err as Error).message.split('\n')[0]}`);
} finally {
  await client.close();
}
