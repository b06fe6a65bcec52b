// Schemas the API description needs beyond the resources' own: the error body and the proxy
// and probe answers (described from the v1 contract; the proxy module owns their behaviour). Objects are
// loose where another module may add fields, strict where this module controls the output;
// either way every field an answer carries is declared: test/openapi.test.ts validates live
// answers with every declared object closed, so an undeclared field fails it.
import { z } from 'zod';
import { POLICY_ACTIONS, PolicyDocument, PolicyRule } from '../../gateway/policy/schema.ts';

export const ErrorBody = z
  .strictObject({ error: z.string().meta({ description: 'Coarse, caller-safe message; never internal state.' }) })
  .meta({ id: 'Error', description: 'Body of every 4xx answer that carries one. 401 and 500 have no body.' });

export const InvocationAccepted = z
  .looseObject({ invocation_id: z.string().regex(/^inv_/) })
  .meta({ id: 'InvocationAccepted' });

const nullableString = z.string().nullable();
export const Invocation = z
  .looseObject({
    invocation_id: z.string().regex(/^inv_/),
    agent_id: z.string(),
    status: z.enum(['pending', 'running', 'succeeded', 'failed']),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
    completed_at: z.iso.datetime({ offset: true }).nullable(),
    upstream_status: z.int().nullable(),
    latency_ms: z.int().nullable(),
    ttft_ms: z
      .int()
      .nullable()
      .meta({ description: 'Time to the first upstream body byte (streaming calls); null otherwise or until known.' }),
    error_class: nullableString.meta({
      description:
        'Why the call failed or counts as an error (`connect`, `timeout`, `blocked`, `circuit_open`, `upstream_4xx`, `upstream_5xx`, `stream_interrupted`, `caller_aborted`, `interrupted`, `credential`, `protocol`, `internal`, `gateway_lost`, `workflow_terminated`, `workflow_failed`); null for a clean answer or while running. docs/PROXY.md "Error classes".',
    }),
    mode: z.enum(['transactional', 'streaming']),
    model: nullableString.meta({ description: "The caller's `X-Gateway-Model`, when given." }),
    request_id: z.string().meta({ description: 'The `X-Request-ID` the call carried upstream.' }),
    caller_kind: z.enum(['token', 'x402']).meta({
      description: "`token`: a /v1 bearer token's caller; `x402`: a public agent's payer (no token).",
    }),
    mcp_method: nullableString,
    mcp_tool: nullableString,
    payment_network: nullableString,
    payment_asset: nullableString,
    payment_amount: nullableString,
    payment_payer: nullableString,
    payment_nonce: nullableString,
    payment_transaction: nullableString.meta({
      description: 'The settlement transaction hash, when the payment was settled through a facilitator.',
    }),
    response_body_b64: z
      .string()
      .optional()
      .meta({ description: 'Present only on the poll, once complete, when a response body was captured.' }),
  })
  .meta({ id: 'Invocation' });

const PaymentRequirements = z
  .looseObject({
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
      .looseObject({ name: z.string(), version: z.string() })
      .optional()
      .meta({ description: "The token's EIP-712 domain name and version." }),
  })
  .meta({ id: 'PaymentRequirements' });

export const PaymentChallenge = z
  .looseObject({
    x402Version: z.int(),
    error: z.string().optional().meta({ description: 'Why payment is required (x402 v1).' }),
    accepts: z.array(PaymentRequirements),
  })
  .meta({
    id: 'PaymentChallenge',
    description: 'x402 v1 challenge (402 without a payment header); the v2 one is in the PAYMENT-REQUIRED header.',
  });

export const Health = z.looseObject({ status: z.string() }).meta({ id: 'Health' });
export const Readiness = z
  .object({
    status: z.enum(['ready', 'not_ready']),
    checks: z.object({
      database: z.boolean(),
      start_backlog: z.boolean().meta({ description: 'The start backlog has room.' }),
    }),
    temporal: z.enum(['reachable', 'unreachable']).meta({
      description:
        'Reported, not required: transactional calls are accepted while Temporal is away, up to the start backlog.',
    }),
    start_backlog: z.object({
      accepted_unstarted: z
        .number()
        .int()
        .meta({ description: 'Accepted calls of this process whose workflow start is not yet known.' }),
      limit: z.number().int(),
    }),
  })
  .meta({ id: 'Readiness' });
export const Version = z
  .looseObject({ name: z.string(), version: z.string(), commit: z.string().nullable() })
  .meta({ id: 'Version' });

// Policy, analytics, invocation records and receipts (their modules own the behaviour; the
// request schema is the policy module's own zod schema).
export const PolicyDocumentInput = PolicyDocument.meta({
  id: 'PolicyDocument',
  description: 'Wholesale replace: default, on_error and rules are set exactly as given.',
});
export const PolicyVersion = z
  .strictObject({ version: z.int(), updated_at: z.iso.datetime({ offset: true }) })
  .meta({ id: 'PolicyVersion' });
export const PolicyView = z
  .looseObject({
    default: z.enum(POLICY_ACTIONS),
    on_error: z.enum(POLICY_ACTIONS),
    rules: z.array(PolicyRule),
    version: z.int(),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Policy' });
const PolicyDecision = z
  .looseObject({
    id: z.string().regex(/^pdec_/),
    agent_id: z.string(),
    protocol: z.string(),
    mcp_tool: z.string().nullable(),
    action: z.enum(POLICY_ACTIONS),
    matched_rule: z
      .string()
      .meta({ description: '1-based rule position; empty when the action came from default or on_error.' }),
    reason: z.string(),
    invocation_id: z.string().regex(/^inv_/).nullable().meta({
      description:
        'The id of the invocation the call was given (an addition to the v1 contract); null for a deny, which never becomes one. A call refused after the policy stage (402, 503) has no invocation record under it.',
    }),
    created_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'PolicyDecision' });
export const PolicyDecisionList = z
  .looseObject({ data: z.array(PolicyDecision), limit: z.int() })
  .meta({ id: 'PolicyDecisionList' });

const Percentiles = z.looseObject({
  p50: z.number().nullable(),
  p95: z.number().nullable(),
  p99: z.number().nullable(),
});
export const AnalyticsResult = z
  .looseObject({
    range: z.looseObject({ since: z.iso.datetime({ offset: true }), until: z.iso.datetime({ offset: true }) }),
    bucket: z.enum(['hour', 'day']),
    groups: z.array(
      z.looseObject({
        agent_id: z.string(),
        bucket_start: z.iso.datetime({ offset: true }),
        count: z.int(),
        error_rate: z.number().min(0).max(1),
        by_error_class: z.record(z.string(), z.int()),
        latency_ms: Percentiles,
        ttft_ms: Percentiles,
      }),
    ),
  })
  .meta({ id: 'AnalyticsResult' });

export const InvocationList = z
  .looseObject({ data: z.array(Invocation), next_cursor: z.string().nullable() })
  .meta({ id: 'InvocationList' });
export const Receipt = z
  .looseObject({
    invocation_id: z.string(),
    agent_id: z.string(),
    kid: z.string(),
    alg: z.string(),
    format: z.string(),
    receipt: z.string(),
    created_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Receipt' });
export const Jwks = z.looseObject({ keys: z.array(z.record(z.string(), z.unknown())) }).meta({ id: 'JWKS' });
