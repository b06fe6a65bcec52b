// An MCP agent's call as the gateway sees it: the body must be exactly one JSON-RPC 2.0 request
// (gateway/jsonrpc/request.ts); its method (and, for tools/call, the tool name) drive policy,
// per-tool prices and records. A payment carried the x402 MCP transport's way, in
// `params._meta["x402/payment"]`, is taken out (gateway/mcp/x402.ts): the gate reads it, and the
// upstream gets the request re-serialized without that one key (the only change the gateway
// ever makes to a forwarded body; other bodies go as sent).
import { JSON_RPC_MEMBERS, JsonRpcRequestError, parseJsonRpcRequest, refuseCaseVariants } from '../jsonrpc/request.ts';
import { idSpanOf, type IdSpan } from '../jsonrpc/own-id.ts';
import { paymentInMeta } from './x402.ts';

/** The tool-call view of one MCP request. */
export type McpCall = {
  method: string;
  tool: string | null;
  /** The JSON-RPC request's id (absent for a notification): the response that answers it carries the same. */
  rpcId?: string | number;
  /**
   * `params._meta["x402/payment"]` as sent (the x402 MCP transport's PaymentPayload), undefined
   * when the key is absent. Never forwarded: `forwardBody` is the request without it.
   */
  payment?: unknown;
  /** The body to forward and store when `payment` was present: re-serialized without that one key. */
  forwardBody?: Buffer;
  /**
   * Set when the request goes up under a JSON-RPC id of the gateway's own (a call charged after
   * its answer, gateway/jsonrpc/own-id.ts): that id, and the caller's as JSON text, which the
   * answer is given back under.
   */
  ownId?: { id: string; callerIdText: string };
  /** Where the id of the body to forward lies (null: it has none); found only for an agent that may send it under the gateway's own. */
  idSpan?: IdSpan | null;
};

/**
 * The call of this body; a JsonRpcRequestError says why it is not one the gateway passes.
 * `idOnce`: the request may go up under the gateway's own id (an agent that charges after the
 * answer, gateway/jsonrpc/own-id.ts): where its id lies is found (`idSpan`), and an id named
 * twice, which the gateway could not replace as the upstream reads it, is refused.
 */
export function parseMcpRequest(body: Buffer, idOnce = false): McpCall {
  const { request, parsed } = parseJsonRpcRequest(body, 'MCP');
  const params = request.params as { name?: unknown } | undefined;
  refuseCaseVariants('MCP', [
    [parsed, JSON_RPC_MEMBERS],
    [params, ['name']],
  ]);
  const tool = request.method === 'tools/call' && typeof params?.name === 'string' ? params.name.slice(0, 256) : null;
  // Both are recorded as text, which PostgreSQL cannot hold with U+0000 in it.
  if (request.method.includes('\u0000') || tool?.includes('\u0000'))
    throw new JsonRpcRequestError('MCP method and tool names must not contain NUL characters');
  const payment = paymentInMeta(parsed, body);
  // Found once, in the body that goes up (without a payment in `_meta`, if it had one).
  const idSpan = idOnce ? { idSpan: idSpanOf(payment.forwardBody ?? body) } : {};
  return { method: request.method, tool, rpcId: request.id, ...payment, ...idSpan };
}
