// The x402 MCP transport (x402 specs/transports-v2/mcp.md), its pure part: a payment travels in
// a tools/call request's `params._meta["x402/payment"]`, the settled payment's SettleResponse
// comes back in the result's `_meta["x402/payment-response"]`, and a priced tools/call without
// an acceptable payment may be answered as a JSON-RPC *result* (the tool-result binding:
// `isError: true`, the v2 PaymentRequired in `structuredContent` and as JSON text in
// `content[0].text`). Which routes answer that way, and with which PaymentRequired, is the
// door's (api/proxy/mcp.ts).
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { JsonRpcRequestError } from '../jsonrpc/request.ts';
import { parseKeepingNumbers } from '../jsonrpc/exact-json.ts';
import { isResultFor, rpcResult } from '../jsonrpc/response.ts';
import { responseRewriter } from '../jsonrpc/response-rewriter.ts';

/** The key of the x402 MCP transport's payment in a request's `params._meta`. */
const PAYMENT_META_KEY = 'x402/payment';
/** The key of its receipt in a result's `_meta`. */
const RESPONSE_META_KEY = 'x402/payment-response';

/**
 * The largest request that may carry a payment in `_meta`: a paid tools/call is small, and its
 * re-serialization (one object per number, below) is then bounded whatever the 32 MiB body cap.
 */
const MAX_PAID_MCP_BODY = 64 * 1024;

/**
 * `"x402/payment":` as a JSON object key, each character as written or as a `\uXXXX` escape
 * (`/` also as `\/`): JSON.parse keeps only the last of duplicate keys, so the raw text is
 * counted too, and a key the parsed request does not show is never forwarded.
 */
const PAYMENT_KEY_TEXT = new RegExp(
  `"${[...PAYMENT_META_KEY]
    .map((c) => {
      const hex = c.charCodeAt(0).toString(16).padStart(4, '0');
      const escaped = `\\\\u${[...hex].map((h) => (/[a-f]/.test(h) ? `[${h}${h.toUpperCase()}]` : h)).join('')}`;
      return `(?:${c === '/' ? '\\/|\\\\/' : c}|${escaped})`;
    })
    .join('')}"\\s*:`,
  'g',
);

type JsonRpc = { params?: { _meta?: Record<string, unknown> } };

/**
 * The payment a request (`parsed`, from `body`) carries in `params._meta`, and the body to
 * forward without it; nothing when it carries none. Refuses a key hidden from the parsed view
 * (duplicated or escaped) and a paid request over MAX_PAID_MCP_BODY.
 */
export function paymentInMeta(parsed: unknown, body: Buffer): { payment?: unknown; forwardBody?: Buffer } {
  const meta = (parsed as JsonRpc).params?._meta;
  const present = !!meta && typeof meta === 'object' && !Array.isArray(meta) && Object.hasOwn(meta, PAYMENT_META_KEY);
  const text = body.toString('utf8');
  const written = text.match(PAYMENT_KEY_TEXT)?.length ?? 0;
  if (written !== (present ? 1 : 0))
    throw new JsonRpcRequestError('MCP body has a duplicate or hidden x402/payment key (only one, in params._meta)');
  if (!present) return {};
  if (body.length > MAX_PAID_MCP_BODY)
    throw new JsonRpcRequestError(
      `an MCP request with x402/payment in params._meta must be at most ${MAX_PAID_MCP_BODY / 1024} KiB`,
    );
  const payment = meta[PAYMENT_META_KEY];
  // Parsed again keeping every number's own text, so the re-serialized request says exactly what
  // the caller's did, less the payment.
  const exact = parseKeepingNumbers(text) as Required<JsonRpc>;
  delete exact.params._meta![PAYMENT_META_KEY];
  return { payment, forwardBody: Buffer.from(JSON.stringify(exact), 'utf8') };
}

/**
 * A wrapper adding `receipt` to the JSON-RPC response to request `rpcId` (same id, a `result`)
 * in the upstream's answer, through the bounded re-writer (gateway/jsonrpc/response-rewriter.ts),
 * its numbers as the upstream wrote them; null when the answer is not plain JSON or SSE. A
 * JSON-RPC error, or an answer the re-writer passes unchanged, gets no receipt in its body.
 */
export function receiptInjector(
  headers: IncomingHttpHeaders,
  rpcId: string | number,
  receipt: unknown,
  /**
   * The payment is a channel's voucher, charged after the answer: a failed tool's result
   * (`isError`) costs nothing (gateway/mcp/answer-watch.ts), so it carries no receipt either,
   * and the payer's client keeps the state the gateway keeps. (A deposit's receipt always goes:
   * it tells the client what it deposited.)
   */
  chargedIfServed = false,
): ((body: Readable) => Readable) | null {
  return responseRewriter(headers, (text) => withReceipt(text, rpcId, receipt, chargedIfServed));
}

/** The response with the receipt in `result._meta`, or null when it is not this request's result. */
function withReceipt(text: string, rpcId: string | number, receipt: unknown, chargedIfServed: boolean): string | null {
  // A plain parse decides; only the one matching response is parsed again keeping its numbers'
  // text (one object per number), so a stream of other events costs one plain parse each.
  if (!text.startsWith('{') || !isResultFor(text, rpcId)) return null;
  const response = parseKeepingNumbers(text) as { result: { _meta?: unknown; isError?: unknown } };
  const result = response.result;
  if (chargedIfServed && result.isError === true) return null;
  const meta = result._meta && typeof result._meta === 'object' && !Array.isArray(result._meta) ? result._meta : {};
  return JSON.stringify({ ...response, result: { ...result, _meta: { ...meta, [RESPONSE_META_KEY]: receipt } } });
}

/** The JSON-RPC response telling the client of request `rpcId` to pay: the tool result carrying `required`. */
export function paymentRequiredToolResult(
  rpcId: string | number | null | undefined,
  required: unknown,
): Record<string, unknown> {
  return rpcResult(rpcId, {
    isError: true,
    structuredContent: required,
    content: [{ type: 'text', text: JSON.stringify(required) }],
  });
}
