// What the proxy pipeline knows about one call as it passes through its stages
// (the v1 contract's order: parse → policy → payment → forward). Stages add to it; none reads the body
// unless it must.
import type { Agent } from '../../gateway/db/entities.ts';
import type { Caller } from '../auth.ts';
import type { DecisionRecord } from '../../gateway/policy/store.ts';
import type { Dialect } from '../payment/dialect.ts';

export type McpCall = { method: string; tool: string | null };

export type PaymentRecord = {
  network: string;
  asset: string;
  amount: string;
  payer: string;
  nonce: string;
  transaction: string | null;
  /** The x402 dialect the caller paid in: it names the receipt header (dialect.ts). */
  dialect: Dialect;
  /** base64 JSON for the receipt header (X-PAYMENT-RESPONSE or PAYMENT-RESPONSE), set after a successful settle. */
  responseHeader: string | null;
};

export type ProxyCall = {
  caller: Caller;
  agent: Agent;
  mode: 'transactional' | 'streaming';
  /** The id the call's invocation gets once it is accepted (also recorded on its policy decision). */
  invocationId: string;
  requestId: string;
  model: string | null;
  contentType: string | null;
  /** Request body size in bytes; null on the streaming path without Content-Length (treated as unbounded). */
  bodyBytes: number | null;
  /** The absolute URL the caller called (the x402 `resource`). */
  resourceUrl: string;
  /** Parse stage: the JSON-RPC request of an MCP agent. */
  mcp: McpCall | null;
  /** Policy stage: set when the decision was `warn`. */
  policyWarning: string | null;
  /** Payment stage: the verified (and, when configured, settled) payment. */
  payment: PaymentRecord | null;
  /** Policy stage: a decision left for the accept commit to write (policy/stage.ts says when). */
  policyDecision?: DecisionRecord | null;
};

/** The invocation-row columns a call's parse and payment stages determine (both proxy paths). */
export function recordedCallFields(call: ProxyCall) {
  return {
    mcpMethod: call.mcp?.method ?? null,
    mcpTool: call.mcp?.tool ?? null,
    paymentNetwork: call.payment?.network ?? null,
    paymentAsset: call.payment?.asset ?? null,
    paymentAmount: call.payment?.amount ?? null,
    paymentPayer: call.payment?.payer ?? null,
    paymentNonce: call.payment?.nonce ?? null,
    paymentTransaction: call.payment?.transaction ?? null,
  };
}
