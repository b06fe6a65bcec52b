// The x402 A2A transport's receipt: a message paid in its metadata and settled gets, in the
// agent's answer, `x402.payment.status: "payment-completed"` and `x402.payment.receipts:
// [SettleResponse]` in the metadata of the answer's task status message (one is added when the
// task has none) or of the Message it answers with (gateway/a2a/x402.ts addReceipt). The payment
// is settled before the agent is called, so the first response to the request carries it: the
// JSON answer, or the first SSE event that answers the request with a task, status update or
// message. It passes through rpc-response-rewriter.ts's bounded re-writer (the PAYMENT-RESPONSE header
// carries the receipt whatever the answer).
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { addReceipt } from '../../gateway/a2a/x402.ts';
import { isResultFor, responseRewriter } from './rpc-response-rewriter.ts';
import { parseKeepingNumbers } from './parse.ts';
import type { ProxyCall } from './call.ts';

export function a2aReceiptInjector(
  call: Pick<ProxyCall, 'a2a' | 'payment'>,
  headers: IncomingHttpHeaders,
): ((body: Readable) => Readable) | null {
  const receipt = call.payment?.metaResponse;
  const x402 = call.a2a?.x402;
  const rpcId = call.a2a?.rpcId;
  if (!receipt || !x402?.paid || rpcId === undefined || rpcId === null) return null;
  return responseRewriter(headers, (text) => {
    if (!text.startsWith('{') || !isResultFor(text, rpcId)) return null;
    const response = parseKeepingNumbers(text) as { result: unknown };
    return addReceipt(response.result, x402.spelling, receipt) ? JSON.stringify(response) : null;
  });
}
