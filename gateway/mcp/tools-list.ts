// The tools an MCP agent's upstream says it has (`tools/list`), read with the MCP SDK's client
// over streamable HTTP (initialize, notifications/initialized, tools/list, then the session is
// closed) and with the same safety as every upstream call: each request goes through the
// SSRF-guarded dispatcher (an undici fetch bound to it, handed to the SDK's transport), no
// redirect is followed, the agent's credential goes in the headers, and the whole exchange has
// one time bound and one size bound. The SDK's GET for a stream of server messages is answered
// here as a server without one answers it (405), so the upstream sees only what the exchange
// needs. Only the first page is read. What comes back is untrusted: the caller validates each
// tool before showing it to anyone (api/discovery/tool-schemas.ts); a failure says only why in
// general terms (no upstream text, nothing of the credential).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  type StreamableHTTPClientTransportOptions,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { isInitializeRequest, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { fetch as undiciFetch, type Dispatcher, type RequestInit as UndiciRequestInit } from 'undici';
import { z } from 'zod';

/** Every answer of the exchange together (a tools/list of a few dozen tools is tens of KiB). */
const MAX_BYTES = 256 * 1024;
/** Connects, answers and bodies of the whole exchange. */
const TIMEOUT_MS = 3_000;
const PROTOCOL_VERSION = '2025-06-18';

class ToolsListError extends Error {}

/** A tool as the upstream listed it: name, description and input schema, not yet validated. */
export type ListedTool = { name: string; description?: unknown; inputSchema?: unknown };

/**
 * The tools/list result as read here: a list, each tool checked by the caller on its own (the
 * SDK's own schema would refuse the whole list for one tool it does not like).
 */
const ListedTools = z.looseObject({ tools: z.array(z.unknown()) });

/** Statuses whose Response has no body. */
const NULL_BODY = new Set([101, 204, 205, 304]);

type Bounds = { signal: AbortSignal; stop: AbortController; budget: { left: number; exceeded: boolean } };

/**
 * The fetch the SDK's transport is given: through `dispatcher`, within the exchange's bounds,
 * following no redirect, every body counted against the exchange's budget.
 */
function boundedFetch(dispatcher: Dispatcher, bounds: Bounds) {
  return async (url: string | URL, init?: RequestInit): Promise<Response> => {
    if ((init?.method ?? 'GET').toUpperCase() === 'GET') return new Response(null, { status: 405 });
    const signal = init?.signal ? AbortSignal.any([init.signal, bounds.signal]) : bounds.signal;
    const reply = await undiciFetch(url, {
      ...(init as UndiciRequestInit),
      redirect: 'manual',
      signal,
      dispatcher,
    });
    if (reply.status >= 300 && reply.status < 400) {
      await reply.body?.cancel();
      throw new ToolsListError(`the upstream answered ${reply.status}`);
    }
    const counted =
      reply.body && !NULL_BODY.has(reply.status)
        ? reply.body.pipeThrough(
            new TransformStream<Uint8Array, Uint8Array>({
              transform(chunk, controller) {
                bounds.budget.left -= chunk.byteLength;
                if (bounds.budget.left >= 0) return controller.enqueue(chunk);
                bounds.budget.exceeded = true;
                controller.error(new ToolsListError('over budget'));
                bounds.stop.abort();
              },
            }),
          )
        : null;
    return new Response(counted, {
      status: reply.status,
      statusText: reply.statusText,
      headers: reply.headers as unknown as Headers,
    });
  };
}

/** A transport whose initialize asks for `version` (the agent's own) instead of the SDK's latest. */
function transportAsking(
  url: string,
  options: StreamableHTTPClientTransportOptions,
  version: string,
): StreamableHTTPClientTransport {
  const transport = new StreamableHTTPClientTransport(new URL(url), options);
  const send = transport.send.bind(transport);
  transport.send = (message: JSONRPCMessage, sendOptions) =>
    send(
      isInitializeRequest(message) ? { ...message, params: { ...message.params, protocolVersion: version } } : message,
      sendOptions,
    );
  return transport;
}

/** The tools the MCP upstream at `url` lists, or a ToolsListError saying why they could not be read. */
export async function fetchToolsList(
  dispatcher: Dispatcher,
  url: string,
  credentialHeaders: Record<string, string>,
  protocolVersion: string | null,
): Promise<ListedTool[]> {
  const timeout = AbortSignal.timeout(TIMEOUT_MS);
  const stop = new AbortController();
  const bounds: Bounds = {
    signal: AbortSignal.any([timeout, stop.signal]),
    stop,
    budget: { left: MAX_BYTES, exceeded: false },
  };
  const transport = transportAsking(
    url,
    { fetch: boundedFetch(dispatcher, bounds), requestInit: { headers: { ...credentialHeaders } } },
    protocolVersion ?? PROTOCOL_VERSION,
  );
  const client = new Client({ name: 'agent-gateway-discovery', version: '1' }, { capabilities: {} });
  const options = { signal: bounds.signal, timeout: TIMEOUT_MS };
  try {
    await client.connect(transport, options);
    const listed = await client.request({ method: 'tools/list', params: {} }, ListedTools, options);
    // Best effort: the tools were read (an upstream that refuses it keeps the session until its own timeout).
    if (transport.sessionId) await transport.terminateSession().catch(() => undefined);
    return listed.tools.filter(
      (tool): tool is ListedTool =>
        tool !== null && typeof tool === 'object' && typeof (tool as { name?: unknown }).name === 'string',
    );
  } catch (err) {
    if (bounds.budget.exceeded)
      throw new ToolsListError(`the upstream's answers are larger than ${MAX_BYTES / 1024} KiB`);
    if (err instanceof ToolsListError) throw err;
    throw new ToolsListError(
      timeout.aborted ? 'the upstream did not list its tools in time' : 'the upstream could not be read',
    );
  } finally {
    await client.close().catch(() => undefined);
  }
}
