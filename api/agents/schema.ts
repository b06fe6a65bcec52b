// Agent request bodies (zod) and the create rules of docs/API.md "Agents" (answers: ./view.ts). The OpenAPI
// document is generated from these schemas. Messages name the field, never internal state.
import { z } from 'zod';
import { isAddress } from 'ethers';
import { PublicInterfaceInput } from './public-interface.ts';
import { idField, maxChars, nameField } from '../validation.ts';
import { A2A_METHODS, canonicalA2aMethod } from '../../gateway/a2a/methods.ts';
import { meteredPricingError, meteredPricingFields, refineMeteredPricing } from '../../gateway/metering/meter.ts';
import { channelTermsError, channelTermsFields, refineChannelTerms } from '../../gateway/payment/channel-terms.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';

/** MCP protocol revisions the gateway knows (the MCP specification's dated revision identifiers). */
export const MCP_PROTOCOL_VERSIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25'] as const;

const UINT256_MAX = (1n << 256n) - 1n;
// Runs after the regex even when it failed (zod reports every check), so it must not throw.
const fitsUint256 = (value: string) => !/^[0-9]+$/.test(value) || BigInt(value) <= UINT256_MAX;

const Amount = z
  .string({ error: 'pricing.amount must be a decimal integer string' })
  .regex(/^[1-9][0-9]{0,77}$/, 'pricing.amount must be a positive decimal integer string in the smallest unit')
  .refine(fitsUint256, 'pricing.amount is too large');
const ToolPrice = z
  .string({ error: 'pricing.tools prices must be decimal integer strings' })
  .regex(/^(0|[1-9][0-9]{0,77})$/, 'pricing.tools prices must be decimal integer strings')
  .refine(fitsUint256, 'pricing.tools price is too large');

/**
 * The document's statement of refinePricing, which no field's schema says: scheme upto requires a
 * meter, batch-settlement may carry one, no other scheme does; only batch-settlement takes
 * min_deposit and withdraw_delay (min_deposit's floor, the prices, is its description's: no JSON
 * Schema compares two decimal strings). A2A's and MCP's answers carry no token usage the tokens
 * meter reads (`not: TOKENS_METER`, checked on the agent's protocol by agentRuleError).
 */
const schemeIs = (scheme: string) => ({ required: ['scheme'], properties: { scheme: { const: scheme } } });
const PRICING_RULES = {
  allOf: [
    { if: schemeIs(SCHEME_UPTO), then: { required: ['meter'] } },
    {
      if: { required: ['scheme'], properties: { scheme: { enum: [SCHEME_UPTO, SCHEME_BATCH_SETTLEMENT] } } },
      else: { not: { required: ['meter'] } },
    },
    {
      if: schemeIs(SCHEME_BATCH_SETTLEMENT),
      else: { not: { anyOf: [{ required: ['min_deposit'] }, { required: ['withdraw_delay'] }] } },
    },
  ],
};

const TOKENS_METER = {
  type: 'object',
  required: ['meter'],
  properties: { meter: { type: 'object', required: ['kind'], properties: { kind: { const: 'tokens' } } } },
};

const PricingFields = z.strictObject({
  amount: Amount.meta({
    description:
      "Flat per-call price in the asset's smallest unit (USDC: 6 decimals); with scheme upto or batch-settlement, the most one call may cost.",
    example: '10000',
  }),
  asset: z.literal('USDC', { error: 'pricing.asset must be USDC' }),
  network: z.literal('base', { error: 'pricing.network must be base' }),
  pay_to: z
    .string({ error: 'pricing.pay_to must be a hex address' })
    .regex(/^0x[0-9a-fA-F]{40}$/, 'pricing.pay_to must be a hex address')
    .refine((a) => isAddress(a), 'pricing.pay_to has an invalid checksum')
    .meta({ description: 'All lower case, all upper case, or mixed case with a valid EIP-55 checksum (else 400).' }),
  tools: z
    .record(
      maxChars(z.string().min(1, 'pricing.tools names must not be empty'), 200, 'pricing.tools name is too long'),
      ToolPrice,
    )
    .optional()
    .meta({
      description:
        "Per-MCP-tool price overrides (with scheme upto or batch-settlement, each tool's maximum); requires protocol mcp.",
    }),
  methods: z
    .record(
      maxChars(z.string().min(1, 'pricing.methods names must not be empty'), 200, 'pricing.methods name is too long'),
      ToolPrice,
    )
    .optional()
    .meta({
      description: `Per-A2A-method prices; requires protocol a2a. Keys are A2A methods in either spelling (1.0 or 0.3: ${A2A_METHODS.join(', ')} or their 0.3 names), stored under the 1.0 name; another key is a 400.`,
    }),
  skills: z
    .record(
      maxChars(z.string().min(1, 'pricing.skills names must not be empty'), 256, 'pricing.skills name is too long'),
      ToolPrice,
    )
    .optional()
    .meta({
      description:
        "Per-skill prices for a message naming the skill in its metadata (`skill`); requires protocol a2a. A skill's price wins over its method's.",
    }),
  ...meteredPricingFields,
  ...channelTermsFields,
});

/** The pricing object's rules across its fields: the scheme's meter, then its channel terms. */
function refinePricing(pricing: z.infer<typeof PricingFields>, ctx: z.RefinementCtx): void {
  refineMeteredPricing(pricing, ctx);
  refineChannelTerms(pricing, ctx);
}

const PRICING_DESCRIPTION =
  'Presence enables the x402 payment gate. scheme upto (metered) requires a meter; batch-settlement (payment channel) may carry one; no other scheme takes one. min_deposit and withdraw_delay require scheme batch-settlement.';

export const PricingInput = PricingFields.superRefine(refinePricing).meta({
  id: 'PricingInput',
  description: `${PRICING_DESCRIPTION} A tokens meter requires protocol http.`,
  ...PRICING_RULES,
});
export type PricingInput = z.infer<typeof PricingInput>;

const NameField = nameField('name is required');

/** Any JSON value whose strings (keys included) hold no U+0000; the agent's `metadata` values. */
const JsonValue: z.ZodType<z.core.util.JSONType> = z
  .lazy(() =>
    z.union([z.string(), z.number(), z.boolean(), z.null(), z.array(JsonValue), z.record(z.string(), JsonValue)]),
  )
  .meta({ id: 'JsonValue' });

/** The operator's ceiling on what a tenant may set (RATE_LIMIT_AGENT_MAX_RPS, RATE_LIMIT_AGENT_MAX_BURST). */
export type RateCeiling = { rps: number; burst: number };

/** Schema bound for a rate field: the operator's ceiling, never above 100 000. */
const ABSOLUTE_MAX = 100_000;

/** Every mutable field; create makes `name` required, PATCH makes everything optional. */
function mutableFields(ceiling: RateCeiling) {
  const rps = Math.min(ceiling.rps, ABSOLUTE_MAX);
  const burst = Math.min(ceiling.burst, ABSOLUTE_MAX);
  return {
    description: maxChars(
      z.string({ error: 'description must be a string' }),
      4000,
      'description is too long',
    ).nullable(),
    tags: z
      .array(
        maxChars(z.string({ error: 'tags must be strings' }).min(1, 'tags must not be empty'), 100, 'tag is too long'),
        {
          error: 'tags must be an array of strings',
        },
      )
      .max(50, 'too many tags'),
    metadata: z
      .record(z.string(), JsonValue, { error: 'metadata must be an object' })
      .refine((m) => JSON.stringify(m).length <= 16_384, 'metadata is too large')
      .meta({ description: 'Free-form JSON object, at most 16 KiB serialized; the body nests at most 32 levels.' }),
    upstream_url: maxChars(z.string({ error: 'upstream_url must be a string' }), 2048, 'upstream_url is too long')
      .nullable()
      .meta({
        description:
          'http or https URL with a host; loopback, private, link-local and localhost hosts are rejected (400). Setting it makes a pending agent active; null makes it pending.',
      }),
    credential_ref: idField('cred', 'credential_ref does not name a credential')
      .nullable()
      .meta({ description: 'ID of a credential of the tenant, injected into upstream calls; another id is a 400.' }),
    emit_receipts: z.boolean({ error: 'emit_receipts must be a boolean' }),
    capture_body: z.boolean({ error: 'capture_body must be a boolean' }),
    protocol: z.enum(['http', 'mcp', 'a2a'], { error: 'protocol must be http, mcp or a2a' }),
    mcp_transport: z.literal('streamable_http', { error: 'mcp_transport must be streamable_http' }).nullable(),
    mcp_protocol_version: maxChars(
      z.string({ error: 'mcp_protocol_version must be a string' }),
      32,
      'mcp_protocol_version is too long',
    )
      .nullable()
      .meta({ description: `Validated when protocol=mcp: one of ${MCP_PROTOCOL_VERSIONS.join(', ')}.` }),
    pricing: PricingInput.nullable(),
    rate_limit_rps: z
      .number({ error: 'rate_limit_rps must be a number' })
      .positive('rate_limit_rps must be positive')
      .max(rps, `rate_limit_rps may be at most ${rps}`)
      .nullable()
      .meta({ description: "Per-agent calls per second; the maximum is the operator's ceiling." }),
    rate_limit_burst: z
      .int({ error: 'rate_limit_burst must be an integer' })
      .positive('rate_limit_burst must be positive')
      .max(burst, `rate_limit_burst may be at most ${burst}`)
      .nullable()
      .meta({ description: 'Token-bucket depth; requires rate_limit_rps (400 without it).' }),
    retry_non_idempotent: z.boolean({ error: 'retry_non_idempotent must be a boolean' }),
    public: z.boolean({ error: 'public must be a boolean' }).meta({
      description:
        "Open the agent to any x402 client at public_url and public_stream_url, no token. Requires pricing and the tenant's settlement configuration; a public agent cannot be un-priced (set public false first).",
    }),
    a2a_pass_unknown_methods: z.boolean({ error: 'a2a_pass_unknown_methods must be a boolean' }).meta({
      description:
        'protocol a2a: JSON-RPC methods the gateway does not know are passed, unpriced, instead of refused (400). Default false.',
    }),
    public_description: maxChars(
      z.string({ error: 'public_description must be a string' }),
      1000,
      'public_description is too long',
    )
      .nullable()
      .meta({ description: 'What an unauthenticated caller is told the agent does (challenges, the HTML page).' }),
    public_interface: PublicInterfaceInput.nullable(),
  };
}

function allOptional<T extends Record<string, z.ZodType>>(fields: T): { [K in keyof T]: z.ZodOptional<T[K]> } {
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, v.optional()])) as {
    [K in keyof T]: z.ZodOptional<T[K]>;
  };
}

/** Pricing of an http agent: no per-tool prices. */
const noA2aPrices = {
  methods: z.never({ error: 'pricing.methods requires protocol a2a' }).optional(),
  skills: z.never({ error: 'pricing.skills requires protocol a2a' }).optional(),
};
const HttpPricingInput = PricingFields.extend({
  tools: z.never({ error: 'pricing.tools requires protocol mcp' }).optional(),
  ...noA2aPrices,
})
  .superRefine(refinePricing)
  .meta({
    id: 'HttpPricingInput',
    description: `${PRICING_DESCRIPTION} No per-tool (mcp), per-method or per-skill (a2a) prices.`,
    ...PRICING_RULES,
  });
const McpPricingInput = PricingFields.extend(noA2aPrices)
  .superRefine(refinePricing)
  .meta({
    id: 'McpPricingInput',
    description: `${PRICING_DESCRIPTION} Per-tool prices; no per-method or per-skill prices (a2a only); no tokens meter (http only).`,
    ...PRICING_RULES,
    not: TOKENS_METER,
  });
const A2aPricingInput = PricingFields.extend({
  tools: z.never({ error: 'pricing.tools requires protocol mcp' }).optional(),
})
  .superRefine(refinePricing)
  .meta({
    id: 'A2aPricingInput',
    description: `${PRICING_DESCRIPTION} Per-method and per-skill prices; no per-tool prices (mcp only); no tokens meter (http only).`,
    ...PRICING_RULES,
    not: TOKENS_METER,
  });

const isInteger = { type: 'integer' };
const MCP_RULES = {
  mcp_transport: { const: 'streamable_http' },
  mcp_protocol_version: { anyOf: [{ enum: [...MCP_PROTOCOL_VERSIONS] }, { type: 'null' }] },
};
/**
 * The rules across fields a JSON Schema can state, said in the document (if/then) as well as
 * checked by agentRuleError: a burst needs a rate; in a PATCH, the protocol it sets bounds the
 * transport, version and per-tool prices it sends with it (what it leaves to the stored agent
 * is checked on the result, which no schema of the body can see).
 */
const CREATE_RULES = {
  if: { required: ['rate_limit_burst'], properties: { rate_limit_burst: isInteger } },
  then: { required: ['rate_limit_rps'], properties: { rate_limit_rps: { type: 'number' } } },
};
/** A pricing value (or null) that has none of these keys, and (`tokens` false) no tokens meter. */
const pricingWithout = (keys: string[][], tokens = false) => ({
  anyOf: [
    { type: 'null' },
    {
      type: 'object',
      not: { anyOf: [...keys.map((required) => ({ required })), ...(tokens ? [] : [TOKENS_METER])] },
    },
  ],
});
const PATCH_RULES = {
  allOf: [
    {
      if: { required: ['rate_limit_burst'], properties: { rate_limit_burst: isInteger } },
      then: { properties: { rate_limit_rps: { type: 'number' } } },
    },
    {
      if: { required: ['protocol'], properties: { protocol: { const: 'mcp' } } },
      then: { properties: { ...MCP_RULES, pricing: pricingWithout([['methods'], ['skills']]) } },
    },
    {
      if: { required: ['protocol'], properties: { protocol: { const: 'http' } } },
      then: {
        properties: {
          mcp_transport: { type: 'null' },
          pricing: pricingWithout([['tools'], ['methods'], ['skills']], true),
        },
      },
    },
    {
      if: { required: ['protocol'], properties: { protocol: { const: 'a2a' } } },
      then: {
        properties: {
          mcp_transport: { type: 'null' },
          pricing: pricingWithout([['tools']]),
        },
      },
    },
  ],
};

/**
 * The create and update bodies under the operator's rate ceiling. Create is one variant per
 * protocol, so the protocol rules (mcp needs mcp_transport, a known mcp_protocol_version and
 * alone takes pricing.tools) are the schema's, and the document's (oneOf). An update is checked
 * against the agent it would leave (agentRuleError), which no schema of the body can say.
 */
export function agentBodies(ceiling: RateCeiling) {
  const fields = allOptional(mutableFields(ceiling));
  const {
    protocol: _protocol,
    mcp_transport: _transport,
    mcp_protocol_version: version,
    pricing: _pricing,
    a2a_pass_unknown_methods: passUnknown,
    ...common
  } = fields;
  const http = z
    .strictObject({
      name: NameField,
      ...common,
      protocol: z.literal('http').optional().meta({ description: 'Default http.' }),
      mcp_transport: z.null({ error: 'mcp_transport is only valid when protocol is mcp' }).optional(),
      mcp_protocol_version: version.meta({ description: 'Not validated for protocol http.' }),
      pricing: HttpPricingInput.nullable().optional(),
      a2a_pass_unknown_methods: passUnknown,
    })
    .meta(CREATE_RULES);
  const mcp = z
    .strictObject({
      name: NameField,
      ...common,
      protocol: z.literal('mcp'),
      mcp_transport: z.literal('streamable_http', {
        error: 'mcp_transport must be streamable_http when protocol is mcp',
      }),
      mcp_protocol_version: z
        .enum(MCP_PROTOCOL_VERSIONS, {
          error: `mcp_protocol_version must be one of ${MCP_PROTOCOL_VERSIONS.join(', ')}`,
        })
        .nullable()
        .optional(),
      pricing: McpPricingInput.nullable().optional(),
      a2a_pass_unknown_methods: passUnknown,
    })
    .meta(CREATE_RULES);
  const a2a = z
    .strictObject({
      name: NameField,
      ...common,
      protocol: z.literal('a2a'),
      mcp_transport: z.null({ error: 'mcp_transport is only valid when protocol is mcp' }).optional(),
      mcp_protocol_version: version.meta({ description: 'Not validated for protocol a2a.' }),
      pricing: A2aPricingInput.nullable().optional(),
      a2a_pass_unknown_methods: passUnknown,
    })
    .meta({
      ...CREATE_RULES,
      description:
        "With an upstream_url, the upstream's Agent Card is read (its origin's /.well-known/agent-card.json, within 5 s and 256 KiB); a card that cannot be read is a 400.",
    });
  const create = z
    .discriminatedUnion('protocol', [http, mcp, a2a], { error: 'protocol must be http, mcp or a2a' })
    .meta({
      description:
        'rate_limit_burst requires rate_limit_rps; credential_ref must name a credential of the tenant; upstream_url must be a public http(s) URL (else 400).',
    });
  const patch = z.strictObject({ name: NameField.optional(), ...fields }).meta({
    ...PATCH_RULES,
    description:
      'Partial update: absent keys are unchanged, null clears a nullable field (pricing: null removes the price). Validated like create, on the resulting agent (400).',
  });
  return { create, patch };
}

export const AgentSuspendInput = z
  .strictObject({
    reason: maxChars(z.string({ error: 'reason must be a string' }), 500, 'reason is too long').optional(),
  })
  .meta({ id: 'AgentSuspend' });

export const AgentUnsuspendInput = z.strictObject({}).meta({ id: 'AgentUnsuspend', description: 'No fields.' });

/** The fields the cross-field rules read, as they would stand after the create or update. */
export type AgentRuleState = {
  protocol: 'http' | 'mcp' | 'a2a';
  mcp_transport: string | null;
  mcp_protocol_version: string | null;
  pricing: PricingInput | null;
  rate_limit_rps: number | null;
  rate_limit_burst: number | null;
  public: boolean;
};

/** The create rules of docs/API.md "Agents", checked on the resulting state; returns the first violation. */
export function agentRuleError(state: AgentRuleState): string | undefined {
  if (state.protocol === 'mcp' && state.mcp_transport !== 'streamable_http')
    return 'mcp_transport must be streamable_http when protocol is mcp';
  if (state.protocol !== 'mcp' && state.mcp_transport !== null)
    return 'mcp_transport is only valid when protocol is mcp';
  if (
    state.protocol === 'mcp' &&
    state.mcp_protocol_version !== null &&
    !(MCP_PROTOCOL_VERSIONS as readonly string[]).includes(state.mcp_protocol_version)
  ) {
    return `mcp_protocol_version must be one of ${MCP_PROTOCOL_VERSIONS.join(', ')}`;
  }
  if (state.protocol !== 'mcp' && state.pricing?.tools) return 'pricing.tools requires protocol mcp';
  if (state.protocol !== 'a2a' && (state.pricing?.methods || state.pricing?.skills))
    return `pricing.${state.pricing.methods ? 'methods' : 'skills'} requires protocol a2a`;
  const unknownMethod = Object.keys(state.pricing?.methods ?? {}).find((m) => !canonicalA2aMethod(m));
  if (unknownMethod !== undefined) return `pricing.methods: ${unknownMethod.slice(0, 100)} is not an A2A method`;
  // The scheme, meter and channel terms as they go with the protocol the agent is left with (a PATCH may change either).
  const metered =
    state.pricing && (meteredPricingError(state.pricing, state.protocol) ?? channelTermsError(state.pricing));
  if (metered) return metered.message;
  if (state.rate_limit_burst !== null && state.rate_limit_rps === null)
    return 'rate_limit_burst requires rate_limit_rps';
  // A public agent is paid per call: without a price it would be a free, open relay.
  if (state.public && !state.pricing) return 'a public agent must be priced: set pricing, or set public to false';
  return undefined;
}
