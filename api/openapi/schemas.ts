// Schemas the API description needs beyond the resources' own: the error body and the proxy
// and probe answers (described from SPEC; the proxy module owns their behaviour). Objects are
// loose where another module may add fields, strict where this module controls the output.
import { z } from 'zod';

export const ErrorBody = z
  .strictObject({ error: z.string().meta({ description: 'Coarse, caller-safe message; never internal state.' }) })
  .meta({ id: 'Error', description: 'Body of every 4xx answer that carries one. 401 and 500 have no body.' });

export const InvocationAccepted = z.looseObject({ invocation_id: z.string().regex(/^inv_/) }).meta({ id: 'InvocationAccepted' });

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
    mcp_method: nullableString,
    mcp_tool: nullableString,
    payment_network: nullableString,
    payment_asset: nullableString,
    payment_amount: nullableString,
    payment_payer: nullableString,
    payment_nonce: nullableString,
    response_body_b64: z.string().optional().meta({ description: 'Present only when a response body was captured.' }),
  })
  .meta({ id: 'Invocation' });

export const PaymentRequirements = z
  .looseObject({
    scheme: z.string(),
    network: z.string(),
    maxAmountRequired: z.string(),
    asset: z.string(),
    payTo: z.string(),
    resource: z.string(),
    maxTimeoutSeconds: z.int(),
  })
  .meta({ id: 'PaymentRequirements' });

export const PaymentChallenge = z
  .looseObject({ x402Version: z.int(), accepts: z.array(PaymentRequirements) })
  .meta({ id: 'PaymentChallenge', description: 'x402 challenge (402 without X-PAYMENT).' });

export const Health = z.looseObject({ status: z.string() }).meta({ id: 'Health' });
export const Readiness = z.looseObject({ status: z.string(), checks: z.record(z.string(), z.boolean()) }).meta({ id: 'Readiness' });
export const Version = z.looseObject({ name: z.string(), version: z.string(), commit: z.string().nullable() }).meta({ id: 'Version' });
