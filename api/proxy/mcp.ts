// The door's part of an MCP agent's call (the domain's is gateway/mcp/): the parse stage (a
// refused request is a 400), the x402 MCP transport's receipt put into the answer, and its
// payment answers. A priced `tools/call` without an acceptable payment may be answered as a
// JSON-RPC *result* (HTTP 200, the tool-result binding of x402 specs/transports-v2/mcp.md,
// gateway/mcp/x402.ts). The spec's /v1 keeps its HTTP 402 for every payment refusal (a payment
// in `_meta["x402/payment"]` is accepted there too); a route outside /v1, or a virtual MCP
// server's member call, chooses the tool result by setting `paymentAnswer: 'mcp'` on its call.
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { ApiError, parsedOr400 } from '../errors.ts';
import type { ProxyCall } from './call.ts';
import type { ChallengeEntry } from '../../x402/schemas.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { parseMcpRequest, type McpCall } from '../../gateway/mcp/request.ts';
import { paymentRequiredToolResult, receiptInjector } from '../../gateway/mcp/x402.ts';
import { paymentRequiredV2 } from '../../gateway/payment/dialect.ts';
import { discoveryExtensionsOf } from '../discovery/bazaar.ts';
import { a2aPaymentRefused } from '../payment/a2a-transport.ts';

/** Parse stage: the call's tool-call view (gateway/mcp/request.ts); a request it refuses is a 400. */
export function parseMcpBody(body: Buffer, idOnce = false): McpCall {
  return parsedOr400(() => parseMcpRequest(body, idOnce));
}

/**
 * The x402 MCP transport's receipt: a call paid in `params._meta["x402/payment"]` and settled
 * gets its SettleResponse in the JSON-RPC result's `_meta["x402/payment-response"]` (beside the
 * PAYMENT-RESPONSE header, set as for any v2 payment; gateway/mcp/x402.ts receiptInjector).
 * Null when the call has none to add; the caller drops the upstream's Content-Length when it wraps.
 */
export function mcpReceiptInjector(
  call: Pick<ProxyCall, 'mcp' | 'payment'>,
  headers: IncomingHttpHeaders,
): ((body: Readable) => Readable) | null {
  const receipt = call.payment?.metaResponse;
  // The response is found under the id the upstream was sent (the gateway's own, if any).
  const rpcId = call.mcp?.ownId?.id ?? call.mcp?.rpcId;
  if (!receipt || rpcId === undefined) return null;
  // A voucher's receipt only: a deposit's tells the client what it deposited, whatever the tool did.
  const voucher = !!call.payment?.channel && !call.payment.transaction;
  return receiptInjector(headers, rpcId, receipt, voucher);
}

/** What the challenge's `bazaar` extension is built from (a public agent's description). */
type DescribedCall = { agent: Parameters<typeof discoveryExtensionsOf>[0]['agent'] };

/** The JSON-RPC response that tells an MCP client to pay for this call (`error` says why). */
export function mcpPaymentRequired(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'mcp'> & DescribedCall,
  requirements: ChallengeEntry,
  error: string,
): Record<string, unknown> {
  const required = paymentRequiredV2(config, [requirements], error, discoveryExtensionsOf(call));
  return paymentRequiredToolResult(call.mcp?.rpcId, required);
}

/**
 * A payment refusal (402) in the style the call asks for: unchanged for `http` (and on /v1),
 * the JSON-RPC tool result above for an MCP `tools/call` whose route chose `mcp`, the x402 A2A
 * transport's `failed` task for a message sent with that extension (`a2a`). A notification
 * has no id to answer, so it keeps the 402.
 */
export function inAnswerStyle(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'mcp' | 'a2a' | 'paymentAnswer'> & DescribedCall,
  requirements: ChallengeEntry,
  err: ApiError,
): ApiError {
  if (call.paymentAnswer === 'a2a') return a2aPaymentRefused(config, call, err);
  if (err.status !== 402 || call.paymentAnswer !== 'mcp' || call.mcp?.method !== 'tools/call') return err;
  if (call.mcp.rpcId === undefined) return err;
  return new ApiError(200, err.message, {}, mcpPaymentRequired(config, call, requirements, err.message));
}
