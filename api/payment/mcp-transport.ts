// The x402 MCP transport's answers (x402 specs/transports-v2/mcp.md, the tool-result binding):
// a priced `tools/call` without an acceptable payment is answered as a JSON-RPC *result* (HTTP
// 200) with `isError: true`, the v2 PaymentRequired in `structuredContent` and the same object
// as JSON text in `content[0].text`. The spec's /v1 keeps its HTTP 402 for every payment
// refusal (a payment in `_meta["x402/payment"]` is accepted there too); a route outside /v1
// chooses this style by setting `paymentAnswer: 'mcp'` on its call.
import { ApiError } from '../errors.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { ChallengeEntry } from '../../x402/schemas.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { paymentRequiredV2 } from '../../gateway/payment/dialect.ts';
import { discoveryExtensionsOf } from '../discovery/bazaar.ts';
import { a2aPaymentRefused } from './a2a-transport.ts';

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
  return {
    jsonrpc: '2.0',
    id: call.mcp?.rpcId ?? null,
    result: {
      isError: true,
      structuredContent: required,
      content: [{ type: 'text', text: JSON.stringify(required) }],
    },
  };
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
