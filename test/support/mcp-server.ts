// A real MCP server for tests (the SDK's McpServer, stateful, answering over SSE, or in plain
// JSON with `json: true`) with two tools: `echo` ({text}) and `count` ({n}, logging each step as
// a notification, and reporting it as progress when the call asks for it). It records the
// headers and the JSON-RPC bodies that reached it and the sessions ended by DELETE;
// `listDelayMs` holds each tools/list that long. With `label`, it also has a prompt `greet`
// ({name}) and a resource `test://{label}/readme`, both saying the label; with `refreshTool`, a
// tool `refresh` that sends `notifications/tools/list_changed` in its answer. `forget()` drops
// every session, as a restarted server would: a request in one is answered 404, as MCP's
// streamable HTTP says of an expired session.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { rawUpstream, readAll, type RawUpstream } from './proxy-helpers.ts';

/** A stateful MCP server over streamable HTTP: one transport per session, as the SDK's examples do. */
export async function startMcpServer(
  opts: { json?: boolean; listDelayMs?: number; label?: string; refreshTool?: boolean } = {},
): Promise<RawUpstream & { seen: IncomingMessage['headers'][]; bodies: unknown[]; deleted: string[]; forget(): void }> {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const seen: IncomingMessage['headers'][] = [];
  const bodies: unknown[] = [];
  const deleted: string[] = [];

  function newServer(): McpServer {
    const server = new McpServer({ name: 'test-upstream', version: '1.0.0' }, { capabilities: { logging: {} } });
    server.registerTool(
      'echo',
      { description: 'Echoes its text', inputSchema: { text: z.string() } },
      async ({ text }) => ({ content: [{ type: 'text', text: `echo: ${text}` }] }),
    );
    server.registerTool(
      'count',
      { description: 'Counts to n, logging as it goes', inputSchema: { n: z.number().int().min(1).max(10) } },
      async ({ n }, extra) => {
        const progressToken = extra._meta?.progressToken;
        for (let i = 1; i <= n; i++) {
          await extra.sendNotification({
            method: 'notifications/message',
            params: { level: 'info', data: `step ${i}` },
          });
          if (progressToken !== undefined)
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken, progress: i, total: n },
            });
        }
        return { content: [{ type: 'text', text: `counted to ${n}` }] };
      },
    );
    if (opts.refreshTool)
      server.registerTool('refresh', { description: 'Says its tools changed' }, async (extra) => {
        await extra.sendNotification({ method: 'notifications/tools/list_changed' });
        return { content: [{ type: 'text', text: 'refreshed' }] };
      });
    const { label } = opts;
    if (label !== undefined) {
      server.registerPrompt(
        'greet',
        { description: `Greets from ${label}`, argsSchema: { name: z.string() } },
        ({ name }) => ({
          messages: [{ role: 'user', content: { type: 'text', text: `hello ${name} from ${label}` } }],
        }),
      );
      server.registerResource('readme', `test://${label}/readme`, { mimeType: 'text/plain' }, async (uri) => ({
        contents: [{ uri: uri.href, text: `readme of ${label}` }],
      }));
    }
    return server;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    seen.push(req.headers);
    const sessionId = req.headers['mcp-session-id'] as string | undefined;
    const body = req.method === 'POST' ? JSON.parse((await readAll(req)).toString() || 'null') : undefined;
    if (body !== undefined) bodies.push(body);
    if (req.method === 'DELETE' && sessionId) deleted.push(sessionId);
    if (opts.listDelayMs && (body as { method?: unknown } | undefined)?.method === 'tools/list')
      await new Promise((resolve) => setTimeout(resolve, opts.listDelayMs));
    let transport = sessionId ? sessions.get(sessionId) : undefined;
    if (!transport && !sessionId && req.method === 'POST' && isInitializeRequest(body)) {
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: opts.json ?? false,
        onsessioninitialized: (id) => void sessions.set(id, created),
      });
      await newServer().connect(created);
      transport = created;
    }
    if (!transport && sessionId) {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    if (!transport) {
      res
        .writeHead(400, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no session' }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, body);
  }

  const up = await rawUpstream((req, res) => void handle(req, res), '/mcp');
  const forget = () => sessions.clear();
  return Object.assign(up, { seen, bodies, deleted, forget });
}
