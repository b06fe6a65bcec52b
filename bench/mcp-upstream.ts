// The MCP member of `npm run bench:mcp-federation`, on its own process: the MCP SDK's McpServer,
// stateful (one transport per session), answering in plain JSON, with one tool `echo` ({text}).
// Prints `listening PORT` once ready.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const sessions = new Map<string, StreamableHTTPServerTransport>();

async function session(): Promise<StreamableHTTPServerTransport> {
  const server = new McpServer({ name: 'bench-member', version: '1.0.0' });
  server.registerTool(
    'echo',
    { description: 'Echoes its text', inputSchema: { text: z.string() } },
    async ({ text }) => ({
      content: [{ type: 'text', text }],
    }),
  );
  const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: true,
    onsessioninitialized: (id) => void sessions.set(id, transport),
  });
  await server.connect(transport);
  return transport;
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body: unknown = req.method === 'POST' ? JSON.parse(Buffer.concat(chunks).toString() || 'null') : undefined;
  const id = req.headers['mcp-session-id'];
  const transport = typeof id === 'string' ? sessions.get(id) : isInitializeRequest(body) ? await session() : undefined;
  if (!transport) return void res.writeHead(404).end();
  await transport.handleRequest(req, res, body);
}

const server = createServer((req, res) => void handle(req, res).catch(() => res.writeHead(500).end()));
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`));
process.on('SIGTERM', () => process.exit(0));
