// A tiny echo agent for the quick start: answers every POST with what it received. Under /mcp it
// is an MCP server instead (streamable HTTP, stateless, one tool `echo` answering `echo: TEXT`), so
// the MCP example has an agent to call under `npm start` (docs/API.md, "Invocations").
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

const port = Number(process.env.DEMO_UPSTREAM_PORT ?? 8099);

/** One MCP request, stateless: a fresh server and transport per POST, as the SDK's stateless example does. */
async function mcp(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' }).end();
    return;
  }
  const server = new McpServer({ name: 'demo-echo', version: '1.0.0' });
  server.registerTool(
    'echo',
    { description: 'Echoes its text', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text: `echo: ${text}` }] }),
  );
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => void server.close());
  await server.connect(transport);
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  await transport.handleRequest(req, res, parsed);
}

createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (new URL(req.url ?? '/', 'http://demo').pathname === '/mcp') {
      mcp(req, res, body).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
      return;
    }
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ echo: body.toString('utf8'), request_id: req.headers['x-request-id'] ?? null }));
  });
}).listen(port, '127.0.0.1');
