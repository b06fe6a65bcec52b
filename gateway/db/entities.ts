// MikroORM entity definitions for the gateway's tables (schema: migrations/). Property
// names are camelCase in code and snake_case in SQL by MikroORM's default naming.
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';
import { CredentialSchema } from '../credentials/entity.ts';
import { SettlementConfigSchema } from '../settlement/entity.ts';
import { PaymentBindingSchema, type ChargeSettlementState } from '../payment/entity.ts';
import { McpServerSchema, McpServerSessionSchema } from '../mcp-servers/entity.ts';
import { BudgetAlertSecretSchema, BudgetSchema } from '../budgets/entity.ts';
import type { Meter, PricingScheme } from '../metering/meter.ts';

export type Pricing = {
  amount: string;
  asset: 'USDC';
  network: 'base';
  pay_to: string;
  tools?: Record<string, string>;
  /** A2A: per-method prices, keyed by the method's A2A 1.0 name. */
  methods?: Record<string, string>;
  /** A2A: per-skill prices, for a message naming the skill in its metadata. */
  skills?: Record<string, string>;
  /**
   * How the call is paid (default exact); with `upto`, `amount` (and a tool's, method's or
   * skill's price) is the maximum the payer signs and `meter` measures the charge
   * (gateway/metering/); with `batch-settlement`, each such price is the most a call's voucher
   * adds, charged what `meter` measures or, without one, the price. Stored as the API took them
   * (api/agents/schema.ts): `scheme` absent when not given.
   */
  scheme?: PricingScheme;
  meter?: Meter;
  /**
   * `batch-settlement` only (gateway/payment/channel-terms.ts): the least a payer deposits into
   * its channel, a decimal string in the asset's smallest unit; absent when not given.
   */
  min_deposit?: string;
  /** `batch-settlement` only: the channel's withdrawal delay in seconds, stored with its default. */
  withdraw_delay?: number;
};

/** A public agent's self-description (api/agents/public-interface.ts validates it on save). */
export type PublicInterface = {
  input_schema?: Record<string, unknown>;
  input_example?: unknown;
  output_example?: unknown;
  tools?: Record<
    string,
    { description?: string; input_schema?: Record<string, unknown>; example?: Record<string, unknown> }
  >;
};
/** What a metered call's meter read, and the charge's reason (gateway/invocations/metered.ts). */
export type RecordedReading = (
  { kind: 'none' } | { kind: 'usage'; input: number; output: number } | { kind: 'amount'; amount: string }
) & { capped: boolean; reason: string };

export type AgentProtocol = 'http' | 'mcp' | 'a2a';

export const AgentSchema = defineEntity({
  name: 'Agent',
  tableName: 'agents',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    name: p.string(),
    description: p.string().nullable(),
    tags: p.json<string[]>(),
    metadata: p.json<Record<string, unknown>>(),
    upstreamUrl: p.string().nullable(),
    credentialRef: p.string().nullable(),
    emitReceipts: p.boolean(),
    captureBody: p.boolean(),
    protocol: p.string().$type<AgentProtocol>(),
    mcpTransport: p.string().nullable(),
    mcpProtocolVersion: p.string().nullable(),
    pricing: p.json<Pricing>().nullable(),
    rateLimitRps: p.double().nullable(),
    rateLimitBurst: p.integer().nullable(),
    retryNonIdempotent: p.boolean(),
    suspended: p.boolean(),
    suspendedReason: p.string().nullable(),
    /** Open to any x402 client at the public URLs, no token (docs/API.md "Selling an agent to any x402 client"). */
    public: p.boolean().default(false),
    publicDescription: p.string().nullable().default(null),
    /** What a caller needs to call the public agent (discovery, v2 challenges); validated by the API. */
    publicInterface: p.json<PublicInterface>().nullable().default(null),
    /** protocol a2a: the upstream's Agent Card, read on create and when upstream_url changes (gateway/a2a/card.ts). */
    a2aCard: p.json<Record<string, unknown>>().nullable().default(null),
    a2aCardReadAt: p.datetime().nullable().default(null),
    /** protocol a2a: JSON-RPC methods the gateway does not know pass (unpriced) instead of a 400. */
    a2aPassUnknownMethods: p.boolean().default(false),
    deletedAt: p.datetime().nullable(),
    createdBy: p.string(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
export type Agent = InferEntity<typeof AgentSchema>;

export const BodySchema = defineEntity({
  name: 'Body',
  tableName: 'bodies',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    contentType: p.string().nullable(),
    content: p.blob(),
    sizeBytes: p.bigint('number'),
    sha256: p.string(),
    createdAt: p.datetime(),
  },
});

export type InvocationStatus = 'pending' | 'running' | 'succeeded' | 'failed';

export const InvocationSchema = defineEntity({
  name: 'Invocation',
  tableName: 'invocations',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    agentId: p.string(),
    mode: p.string().$type<'transactional' | 'streaming'>(),
    status: p.string().$type<InvocationStatus>(),
    requestId: p.string(),
    caller: p.string(),
    /** `token`: caller is a /v1 token's user claim; `x402`: caller is `x402:<payer address>` (public agents). */
    callerKind: p.string().$type<'token' | 'x402'>().default('token'),
    /** SHA-256 (hex) of a public call's poll key (docs/API.md "Selling an agent to any x402 client"). */
    pollKeySha256: p.string().nullable().default(null),
    model: p.string().nullable(),
    contentType: p.string().nullable(),
    requestHeaders: p.json<Record<string, string>>(),
    requestBodyId: p.string().nullable(),
    requestBytes: p.bigint('number').nullable(),
    responseBodyId: p.string().nullable(),
    responseContentType: p.string().nullable(),
    /** SHA-256 (hex) of the upstream's response body, captured or not: what a trust receipt commits to. */
    responseSha256: p.string().nullable().default(null),
    upstreamStatus: p.integer().nullable(),
    latencyMs: p.bigint('number').nullable(),
    ttftMs: p.bigint('number').nullable(),
    errorClass: p.string().nullable(),
    mcpMethod: p.string().nullable(),
    mcpTool: p.string().nullable(),
    /** protocol a2a: the JSON-RPC method (A2A 1.0 name), the skill named, and the task and context (gateway/a2a/). */
    a2aMethod: p.string().nullable().default(null),
    a2aSkill: p.string().nullable().default(null),
    a2aTaskId: p.string().nullable().default(null),
    a2aContextId: p.string().nullable().default(null),
    attempts: p.integer(),
    paymentNetwork: p.string().nullable(),
    paymentAsset: p.string().nullable(),
    paymentAmount: p.string().nullable(),
    paymentPayer: p.string().nullable(),
    paymentNonce: p.string().nullable(),
    paymentTransaction: p.string().nullable(),
    /** A metered call's (`upto`): the scheme, the maximum signed, the measured charge and what was read (gateway/invocations/metered.ts). */
    paymentScheme: p.string().nullable().default(null),
    paymentMaxAmount: p.string().nullable().default(null),
    paymentCharge: p.string().nullable().default(null),
    meterReading: p.json<RecordedReading>().nullable().default(null),
    /** A metered call's charge after its answer (gateway/payment/charges.ts): null while due. */
    paymentSettlement: p.string().$type<ChargeSettlementState>().nullable().default(null),
    /** Why a failed charge was not collected (charges.ts `UncollectedReason`). */
    paymentSettleError: p.string().nullable().default(null),
    /**
     * A paid metered streamed call's: when its answer must have ended for its charge to be
     * collected (gateway/invocations/metered.ts `streamEndsBy`); the lost-stream sweep closes a row
     * still running past it (stale-streams.ts). Null on every other call.
     */
    streamEndsBy: p.datetime().nullable().default(null),
    /** The due-charges round's lease on this row (temporal/charges-due.ts). */
    chargeLeaseUntil: p.datetime().nullable().default(null),
    /** A batch-settlement call's channel (gateway/payment/channels/): the on-chain channel id. */
    paymentChannel: p.string().nullable().default(null),
    /** The virtual MCP server the call came through (gateway/mcp-servers/); null for a direct call. */
    mcpServerId: p.string().nullable().default(null),
    /** The budget that refused the call (error_class `budget_exceeded`); null on every other call. */
    budgetId: p.string().nullable().default(null),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
    completedAt: p.datetime().nullable(),
  },
});
export type Invocation = InferEntity<typeof InvocationSchema>;

export const gatewayEntities = [
  AgentSchema,
  BodySchema,
  InvocationSchema,
  CredentialSchema,
  SettlementConfigSchema,
  PaymentBindingSchema,
  McpServerSchema,
  McpServerSessionSchema,
  BudgetSchema,
  BudgetAlertSecretSchema,
];
