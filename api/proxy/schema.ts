// The proxy endpoints' path, headers and answers (zod): the Invocation a poll or a list shows
// (api/proxy/serialize.ts builds it, typed by this schema) and the x402 v1 challenge. The
// OpenAPI document is generated from these.
import { z } from 'zod';
import { idParam } from '../validation.ts';

const at = z.iso.datetime({ offset: true });
const nullableString = z.string().nullable();

export const ProxyPath = z.object({ id: idParam('agt', 'Agent') });
export const InvocationPath = z.object({ id: idParam('agt', 'Agent'), inv_id: idParam('inv', 'Invocation') });

/** Headers the gate reads (docs/API.md "Invocations", docs/SETTLEMENT.md for both x402 dialects). */
export const ProxyHeaders = z.object({
  'X-PAYMENT': z
    .string()
    .optional()
    .meta({ description: 'Base64 x402 v1 payment; priced agents only. Not together with PAYMENT-SIGNATURE (402).' }),
  'PAYMENT-SIGNATURE': z.string().optional().meta({
    description:
      'Base64 x402 v2 PaymentPayload (network `eip155:8453`); priced agents only. Not together with X-PAYMENT (402).',
  }),
  'X-Gateway-Model': z
    .string()
    .optional()
    .meta({ description: 'Recorded on the invocation; at most 256 bytes (UTF-8), else 400.' }),
  'X-Request-ID': z.string().optional().meta({ description: 'Carried upstream; one is made when absent.' }),
});

export const InvocationAccepted = z
  .strictObject({ invocation_id: z.string().regex(/^inv_/) })
  .meta({ id: 'InvocationAccepted' });

export const InvocationView = z
  .strictObject({
    invocation_id: z.string().regex(/^inv_/),
    agent_id: z.string(),
    status: z.enum(['pending', 'running', 'succeeded', 'failed']),
    created_at: at,
    updated_at: at,
    completed_at: at.nullable(),
    upstream_status: z.int().nullable(),
    latency_ms: z.int().nullable(),
    ttft_ms: z
      .int()
      .nullable()
      .meta({ description: 'Time to the first upstream body byte (streaming calls); null otherwise or until known.' }),
    error_class: nullableString.meta({
      description:
        'Why the call failed or counts as an error (`connect`, `timeout`, `blocked`, `circuit_open`, `upstream_4xx`, `upstream_5xx`, `stream_interrupted`, `caller_aborted`, `interrupted`, `credential`, `protocol`, `internal`, `gateway_lost`, `workflow_terminated`, `workflow_failed`, `budget_exceeded`, `payment_lapsed`); null for a clean answer or while running. docs/PROXY.md "Error classes".',
    }),
    mode: z.enum(['transactional', 'streaming']),
    model: nullableString.meta({ description: "The caller's `X-Gateway-Model`, when given." }),
    request_id: z.string().meta({ description: 'The `X-Request-ID` the call carried upstream.' }),
    caller_kind: z.enum(['token', 'x402']).meta({
      description: "`token`: a /v1 bearer token's caller; `x402`: a public agent's payer (no token).",
    }),
    mcp_method: nullableString,
    mcp_tool: nullableString,
    mcp_server_id: nullableString.meta({
      description: 'The virtual MCP server (`mcps_<uuidv7>`) the call came through; null for a direct call.',
    }),
    budget_id: nullableString.meta({
      description:
        'The budget that refused the call (`error_class` `budget_exceeded`, docs/API.md "Budgets"); null on every other call.',
    }),
    a2a_method: nullableString.meta({
      description: 'protocol a2a: the JSON-RPC method, by its A2A 1.0 name whichever spelling was sent.',
    }),
    a2a_skill: nullableString.meta({ description: 'protocol a2a: the skill the message named (metadata `skill`).' }),
    a2a_task_id: nullableString.meta({
      description: "protocol a2a: the task the call was about: the request's, else the first its answer named.",
    }),
    a2a_context_id: nullableString.meta({ description: "protocol a2a: the message's context, else its answer's." }),
    payment_network: nullableString,
    payment_asset: nullableString,
    payment_amount: nullableString,
    payment_payer: nullableString,
    payment_nonce: nullableString,
    payment_transaction: nullableString.meta({
      description: 'The settlement transaction hash, when the payment was settled through a facilitator.',
    }),
    // A metered call's fields: always in the answer (null unless metered), optional in the
    // document, added beside the fields a client may already check for completeness.
    payment_scheme: nullableString.optional().meta({
      description:
        '`upto` for a metered call (its agent priced by use), `batch-settlement` for a call paid from a payment channel; null otherwise.',
    }),
    payment_max_amount: nullableString.optional().meta({
      description: "A metered call's maximum: the most it may cost, in the asset's smallest unit; null otherwise.",
    }),
    payment_charge: nullableString.optional().meta({
      description:
        "A metered call's charge, as its meter measured it (at most payment_max_amount; 0 when nothing was measured), once complete; null otherwise. payment_amount is the same once complete.",
    }),
    payment_settlement: nullableString.optional().meta({
      description:
        "Where a metered call's charge stands: null while it is due (or the call is not metered); `settling` (frozen and sent to the facilitator); `settled` (collected, payment_transaction names the transfer; a charge of 0 moves nothing and names none), `failed` (not collected: payment_settle_error says why), `unconfigured` (the tenant has no settlement configured: verified only).",
    }),
    payment_settle_error: nullableString.optional().meta({
      description:
        'Why a failed charge was not collected: `payer_balance_short` (the payer moved its funds), `payer_allowance_revoked`, `authorization_used`, `signed_payment_missing`, `voucher_exceeded` (a channel call whose channel moved past its voucher), `settlement_refused`, `settlement_failed` or `settlement_unavailable`; null otherwise.',
    }),
    payment_channel: nullableString.optional().meta({
      description:
        "A `batch-settlement` call: the payment channel it was paid from (its on-chain id); its charge joins the channel's charged total (`settled`: committed to the channel, claimed on chain in batches; GET /v1/channels). Null otherwise.",
    }),
    response_body_b64: z
      .string()
      .optional()
      .meta({ description: 'Present only on the poll, once complete, when a response body was captured.' }),
  })
  .meta({ id: 'Invocation' });

const PaymentRequirements = z
  .strictObject({
    scheme: z.string(),
    network: z.string(),
    maxAmountRequired: z.string(),
    asset: z.string(),
    payTo: z.string(),
    resource: z.string(),
    maxTimeoutSeconds: z.int(),
    description: z.string().optional(),
    mimeType: z.string().optional(),
    extra: z
      .strictObject({ name: z.string(), version: z.string() })
      .optional()
      .meta({ description: "The token's EIP-712 domain name and version." }),
  })
  .meta({ id: 'PaymentRequirements' });

export const PaymentChallenge = z
  .strictObject({
    x402Version: z.int(),
    error: z.string().optional().meta({ description: 'Why payment is required (x402 v1).' }),
    accepts: z.array(PaymentRequirements),
  })
  .meta({
    id: 'PaymentChallenge',
    description: 'x402 v1 challenge (402 without a payment header); the v2 one is in the PAYMENT-REQUIRED header.',
  });
