// The upstream's tool list read with the MCP SDK's client (gateway/mcp/tools-list.ts), against a
// small streamable-HTTP server on loopback: the exchange goes through the SSRF-guarded
// dispatcher (refused when loopback is not allowed), carries the credential on every request,
// asks the agent's protocol version, opens no GET stream, closes its session, follows no
// redirect and stops at its size bound.
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createUpstreamDispatcher } from '../../gateway/upstream/dispatcher.ts';
import { fetchToolsList } from '../../gateway/mcp/tools-list.ts';

type Seen = { method: string; headers: IncomingHttpHeaders; body: Record<string, unknown> | null };

/** A server answering initialize, the initialized notification, tools/list and DELETE; `tools` is its list. */
async function mcpServer(answer: { tools?: unknown[]; redirect?: boolean; padding?: number } = {}) {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const body = text ? (JSON.parse(text) as Record<string, unknown>) : null;
      seen.push({ method: req.method!, headers: req.headers, body });
      if (answer.redirect) return res.writeHead(307, { location: '/elsewhere' }).end();
      if (req.method !== 'POST') return res.writeHead(200).end();
      if (body?.id === undefined) return res.writeHead(202).end();
      const result =
        body.method === 'initialize'
          ? { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } }
          : { tools: answer.tools ?? [], padding: 'x'.repeat(answer.padding ?? 0) };
      res
        .writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'session-1' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  return { url, seen, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

const allowed = () => createUpstreamDispatcher({ allow: ['127.0.0.1'] });
const credential = { authorization: 'Bearer s3cret' };

describe("reading an MCP upstream's tools/list", () => {
  it("lists the tools through the guarded dispatcher, with the credential, the agent's version, no GET, and closes the session", async () => {
    const upstream = await mcpServer({
      tools: [{ name: 'echo', description: 'Echoes', inputSchema: { type: 'object' } }, { name: 'bare' }, { name: 7 }],
    });
    try {
      const tools = await fetchToolsList(allowed(), upstream.url, credential, '2025-03-26');
      assert.deepEqual(
        tools.map((tool) => tool.name),
        ['echo', 'bare'],
      );
      assert.deepEqual(
        upstream.seen.map((s) => [s.method, s.body?.method ?? null]),
        [
          ['POST', 'initialize'],
          ['POST', 'notifications/initialized'],
          ['POST', 'tools/list'],
          ['DELETE', null],
        ],
      );
      assert.equal((upstream.seen[0].body!.params as { protocolVersion: string }).protocolVersion, '2025-03-26');
      for (const s of upstream.seen) assert.equal(s.headers.authorization, 'Bearer s3cret');
      assert.equal(upstream.seen[3].headers['mcp-session-id'], 'session-1');
    } finally {
      await upstream.close();
    }
  });

  it('is refused by the SSRF guard when loopback is not allowed', async () => {
    const upstream = await mcpServer();
    try {
      await assert.rejects(
        fetchToolsList(createUpstreamDispatcher({ allow: [] }), upstream.url, credential, null),
        /could not be read/,
      );
      assert.equal(upstream.seen.length, 0);
    } finally {
      await upstream.close();
    }
  });

  it('follows no redirect', async () => {
    const upstream = await mcpServer({ redirect: true });
    try {
      await assert.rejects(fetchToolsList(allowed(), upstream.url, credential, null), /answered 307/);
      assert.equal(upstream.seen.length, 1);
    } finally {
      await upstream.close();
    }
  });

  it('stops at 256 KiB for the whole exchange', async () => {
    const upstream = await mcpServer({ padding: 300 * 1024 });
    try {
      await assert.rejects(fetchToolsList(allowed(), upstream.url, credential, null), /larger than 256 KiB/);
    } finally {
      await upstream.close();
    }
  });
});
