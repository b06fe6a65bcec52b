// The x402 MCP transport's receipt: a call paid in `params._meta["x402/payment"]` and settled
// gets its SettleResponse in the JSON-RPC result's `_meta["x402/payment-response"]` (beside the
// PAYMENT-RESPONSE header, set as for any v2 payment), added by the bounded re-writer of
// rpc-response-rewriter.ts to the JSON-RPC response to this request (same id, a `result`), its
// numbers as the upstream wrote them. A JSON-RPC error, or an answer the re-writer passes
// unchanged, keeps only the header's receipt.
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import type { ProxyCall } from './call.ts';
import { parseKeepingNumbers } from './parse.ts';
import { isResultFor, responseRewriter } from './rpc-response-rewriter.ts';
import type { SettleResponseV2 } from '../../x402/v2.ts';

const RESPONSE_META_KEY = 'x402/payment-response';

type Receipt = { rpcId: string | number; receipt: SettleResponseV2 };

/**
 * A wrapper adding the receipt to the upstream's answer, or null when this answer is not one
 * to add it to. The caller drops the upstream's Content-Length when it wraps.
 */
export function mcpReceiptInjector(
  call: Pick<ProxyCall, 'mcp' | 'payment'>,
  headers: IncomingHttpHeaders,
): ((body: Readable) => Readable) | null {
  const receipt = call.payment?.metaResponse;
  const rpcId = call.mcp?.rpcId;
  if (!receipt || rpcId === undefined) return null;
  return responseRewriter(headers, (text) => withReceipt(text, { rpcId, receipt }));
}

/** The response with the receipt in `result._meta`, or null when it is not this request's result. */
function withReceipt(text: string, { rpcId, receipt }: Receipt): string | null {
  // A plain parse decides; only the one matching response is parsed again keeping its numbers'
  // text (one object per number), so a stream of other events costs one plain parse each.
  if (!text.startsWith('{') || !isResultFor(text, rpcId)) return null;
  const response = parseKeepingNumbers(text) as { result: { _meta?: unknown } };
  const result = response.result;
  const meta = result._meta && typeof result._meta === 'object' && !Array.isArray(result._meta) ? result._meta : {};
  return JSON.stringify({ ...response, result: { ...result, _meta: { ...meta, [RESPONSE_META_KEY]: receipt } } });
}
