// What the proxy pipeline knows about one call as it passes through its stages
// (the v1 contract's order: parse → policy → payment → forward). Stages add to it; none reads the body
// unless it must.
import type { Agent } from '../../gateway/db/entities.ts';
import type { Caller } from '../auth.ts';
import type { DecisionRecord } from '../../gateway/policy/store.ts';
import type { PaymentRecord } from '../../gateway/payment/flow.ts';
import { meteredCallFields } from '../../gateway/invocations/metered.ts';
import { priceOf, type Price } from '../../gateway/payment/pricing.ts';
import type { A2aRequestFacts, TaskSeen } from '../../gateway/a2a/methods.ts';
import type { Spelling } from '../../gateway/a2a/x402.ts';
import type { McpCall } from '../../gateway/mcp/request.ts';

/** A message sent with the x402 A2A extension activated (api/proxy/a2a-x402.ts). */
type A2aX402 = {
  /** The answers' JSON shape: the spelling of the method sent. */
  spelling: Spelling;
  /** The message's `x402.payment.status`, as sent (`payment-rejected` declines the payment task it names). */
  status: string | null;
  /** Whether the message carried `x402.payment.payload`; `payload` is its value. */
  paid: boolean;
  payload: unknown;
  /** The gateway's payment task the message pays (its kept request is the call), or null. */
  paymentTaskId: string | null;
  /** The context the answers name. */
  contextId: string;
  /**
   * The request to keep if it is asked payment (serialized, without payment keys); when it pays a
   * kept one, that one's, kept again if its payment is asked again (a corrective refusal).
   */
  request: string;
};

/** An A2A agent's call (api/proxy/a2a.ts): its request's facts, and the first task its answer named. */
export type A2aCall = A2aRequestFacts & {
  rpcId?: string | number | null;
  /** Set while the answer passes (api/proxy/a2a.ts): the first task it named. */
  answered?: TaskSeen | null;
  /** Set when the message was sent with the x402 A2A extension activated. */
  x402?: A2aX402 | null;
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
  /** Parse stage: the JSON-RPC request of an A2A agent. */
  a2a?: A2aCall | null;
  /**
   * What the call costs (gateway/payment/pricing.ts), computed once when its facts are known
   * (withPrice) and read by every later stage; null when the agent is not priced.
   */
  price: Price | null;
  /** Policy stage: set when the decision was `warn`. */
  policyWarning: string | null;
  /** Payment stage: the verified (and, when configured, settled) payment. */
  payment: PaymentRecord | null;
  /**
   * How payment refusals are answered: `http` (default) is the v1 contract's 402; `mcp` is the
   * x402 MCP transport's JSON-RPC tool result (HTTP 200, `isError: true`, api/proxy/mcp.ts),
   * for routes outside /v1 that choose it; `a2a` the x402 A2A transport's task (api/payment/a2a-transport.ts).
   * /v1 sets it only for a virtual MCP server's member call (api/admission/token-door.ts).
   */
  paymentAnswer?: 'http' | 'mcp' | 'a2a';
  /** The virtual MCP server the call came through (api/mcp-servers/), recorded on its invocation. */
  mcpServerId?: string | null;
  /** Policy stage: a decision left for the accept commit to write (policy/stage.ts says when). */
  policyDecision?: DecisionRecord | null;
};

/** The call with its price, computed from its facts (agent, MCP tool, A2A method and skill). */
export function withPrice(call: Omit<ProxyCall, 'price'>): ProxyCall {
  return { ...call, price: priceOf(call) };
}

/** The invocation-row columns a call's parse and payment stages determine (both proxy paths). */
export function recordedCallFields(call: ProxyCall) {
  return {
    mcpMethod: call.mcp?.method ?? null,
    mcpTool: call.mcp?.tool ?? null,
    mcpServerId: call.mcpServerId ?? null,
    a2aMethod: call.a2a ? (call.a2a.method ?? call.a2a.sent) : null,
    a2aSkill: call.a2a?.skill ?? null,
    a2aTaskId: call.a2a?.taskIds[0] ?? null,
    a2aContextId: call.a2a?.contextId ?? null,
    paymentNetwork: call.payment?.network ?? null,
    paymentAsset: call.payment?.asset ?? null,
    paymentAmount: call.payment?.amount ?? null,
    paymentPayer: call.payment?.payer ?? null,
    paymentNonce: call.payment?.nonce ?? null,
    paymentTransaction: call.payment?.transaction ?? null,
    ...meteredCallFields(call.agent.pricing, call.price?.amount),
    paymentChannel: call.payment?.channel?.id ?? null,
  };
}
