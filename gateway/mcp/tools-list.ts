// The tools an MCP agent's upstream says it has (`tools/list`), read over streamable HTTP the way
// an MCP client does (initialize, notifications/initialized, tools/list, then the session is
// closed), through the same SSRF-guarded dispatcher as every upstream call (no redirects
// followed), with the agent's credential, within one time bound and one size bound for the
// whole exchange. Only the first page is read. What comes back is untrusted: the caller
// validates each tool before showing it to anyone (api/discovery/tool-schemas.ts).
import { request, type Dispatcher } from 'undici';

/** Every answer of the exchange together (a tools/list of a few dozen tools is tens of KiB). */
const MAX_BYTES = 256 * 1024;
/** Connects, answers and bodies of the whole exchange. */
const TIMEOUT_MS = 3_000;
const PROTOCOL_VERSION = '2025-06-18';

class ToolsListError extends Error {}

/** A tool as the upstream listed it: name, description and input schema, not yet validated. */
export type ListedTool = { name: string; description?: unknown; inputSchema?: unknown };

type Exchange = { url: string; headers: Record<string, string>; dispatcher: Dispatcher; signal: AbortSignal };

/** The JSON-RPC message answering `id` in a JSON or an event-stream body. */
function answerOf(text: string, contentType: string, id: number): Record<string, unknown> | undefined {
  const messages = contentType.includes('text/event-stream')
    ? text
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
    : [text];
  for (const message of messages) {
    try {
      const parsed = JSON.parse(message) as Record<string, unknown> | null;
      if (parsed && typeof parsed === 'object' && parsed.id === id) return parsed;
    } catch {
      // Not JSON: not the answer.
    }
  }
  return undefined;
}

/** Posts one JSON-RPC message; the body read counts against `budget`. */
async function post(exchange: Exchange, message: Record<string, unknown>, budget: { left: number }) {
  const reply = await request(exchange.url, {
    method: 'POST',
    dispatcher: exchange.dispatcher,
    signal: exchange.signal,
    headers: {
      ...exchange.headers,
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
    },
    body: JSON.stringify({ jsonrpc: '2.0', ...message }),
  });
  const chunks: Buffer[] = [];
  for await (const chunk of reply.body as AsyncIterable<Buffer>) {
    budget.left -= chunk.length;
    if (budget.left < 0) {
      reply.body.destroy();
      throw new ToolsListError(`the upstream's answers are larger than ${MAX_BYTES / 1024} KiB`);
    }
    chunks.push(chunk);
  }
  if (reply.statusCode >= 300) throw new ToolsListError(`the upstream answered ${reply.statusCode}`);
  const header = (name: string) => {
    const value = reply.headers[name];
    return typeof value === 'string' ? value : undefined;
  };
  return {
    text: Buffer.concat(chunks).toString('utf8'),
    contentType: header('content-type') ?? '',
    session: header('mcp-session-id'),
  };
}

/** The tools the MCP upstream at `url` lists, or a ToolsListError saying why they could not be read. */
export async function fetchToolsList(
  dispatcher: Dispatcher,
  url: string,
  credentialHeaders: Record<string, string>,
  protocolVersion: string | null,
): Promise<ListedTool[]> {
  const signal = AbortSignal.timeout(TIMEOUT_MS);
  const budget = { left: MAX_BYTES };
  const exchange: Exchange = { url, headers: { ...credentialHeaders }, dispatcher, signal };
  try {
    const init = await post(
      exchange,
      {
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: protocolVersion ?? PROTOCOL_VERSION,
          capabilities: {},
          clientInfo: { name: 'agent-gateway-discovery', version: '1' },
        },
      },
      budget,
    );
    const initialized = answerOf(init.text, init.contentType, 1)?.result as Record<string, unknown> | undefined;
    if (!initialized) throw new ToolsListError('the upstream did not answer initialize');
    if (init.session) exchange.headers['mcp-session-id'] = init.session;
    if (typeof initialized.protocolVersion === 'string')
      exchange.headers['mcp-protocol-version'] = initialized.protocolVersion;
    await post(exchange, { method: 'notifications/initialized' }, budget);
    const listed = await post(exchange, { id: 2, method: 'tools/list', params: {} }, budget);
    const tools = (answerOf(listed.text, listed.contentType, 2)?.result as Record<string, unknown> | undefined)?.tools;
    if (!Array.isArray(tools)) throw new ToolsListError('the upstream did not answer tools/list');
    if (init.session) await closeSession(exchange);
    return tools.filter(
      (tool): tool is ListedTool => tool !== null && typeof tool === 'object' && typeof tool.name === 'string',
    );
  } catch (err) {
    if (err instanceof ToolsListError) throw err;
    throw new ToolsListError(
      signal.aborted ? 'the upstream did not list its tools in time' : 'the upstream could not be read',
    );
  }
}

/** Ends the session the exchange opened (an upstream that refuses it keeps it until its own timeout). */
async function closeSession(exchange: Exchange): Promise<void> {
  try {
    const reply = await request(exchange.url, {
      method: 'DELETE',
      dispatcher: exchange.dispatcher,
      signal: exchange.signal,
      headers: exchange.headers,
    });
    await reply.body.dump();
  } catch {
    // Best effort: the tools were read.
  }
}
