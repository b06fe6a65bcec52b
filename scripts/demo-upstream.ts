// A tiny echo agent for the quick start: answers every POST with what it received. Under /mcp it
// is an MCP server instead (streamable HTTP, stateless, one tool `echo` answering `echo: TEXT`), so
// the MCP example has an agent to call under `npm start` (docs/API.md, "Invocations"). Under /a2a
// it is an A2A agent (JSON-RPC, A2A 1.0 and 0.3, its card at /.well-known/agent-card.json, one
// skill `echo` whose task completes with `echo: TEXT`), for the A2A example (docs/API.md, "A2A agents").
// At /v1/chat/completions it answers as OpenAI's Chat Completions do, JSON or streamed, with the
// token usage and its price in a header: an agent to meter (scripts/lib/demo-chat.ts).
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { AgentCard, Task, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor } from '@a2a-js/sdk/server';
import { serveA2a } from './lib/a2a-http.ts';
import { serveChatCompletions } from './lib/demo-chat.ts';
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

/** The A2A echo skill: every message becomes a task completed with `echo: TEXT`. */
const echoExecutor: AgentExecutor = {
  async execute(ctx, bus) {
    const text = ctx.userMessage.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
    const ids = { taskId: ctx.taskId, contextId: ctx.contextId };
    bus.publish(
      AgentEvent.task(
        Task.fromJSON({ id: ctx.taskId, contextId: ctx.contextId, status: { state: 'TASK_STATE_SUBMITTED' } }),
      ),
    );
    bus.publish(
      AgentEvent.statusUpdate(
        TaskStatusUpdateEvent.fromJSON({
          ...ids,
          status: {
            state: 'TASK_STATE_COMPLETED',
            message: { messageId: randomUUID(), role: 'ROLE_AGENT', parts: [{ text: `echo: ${text}` }], ...ids },
          },
        }),
      ),
    );
    bus.finished();
  },
  async cancelTask() {},
};
const a2aCard = AgentCard.fromJSON({
  name: 'demo-echo',
  description: 'Echoes what it is sent',
  version: '1.0.0',
  supportedInterfaces: [
    { url: `http://127.0.0.1:${port}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
    { url: `http://127.0.0.1:${port}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
  ],
  capabilities: { streaming: true },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'echo', name: 'echo', description: 'Answers `echo: TEXT`', tags: ['demo'] }],
});
const a2a = new DefaultRequestHandler(a2aCard, new InMemoryTaskStore(), echoExecutor);

createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const path = new URL(req.url ?? '/', 'http://demo').pathname;
    if (path === '/a2a' || path === '/.well-known/agent-card.json') {
      serveA2a(a2a, a2aCard, req, res, body).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
      return;
    }
    if (path === '/v1/chat/completions') {
      serveChatCompletions(req, res, body);
      return;
    }
    if (path === '/mcp') {
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
