// The Agent as answers show it, and the list's and paths' parameters (zod); the OpenAPI document is
// generated from these. The request bodies and their rules are in ./schema.ts.
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';
import { idParam, maxChars, NO_NUL } from '../validation.ts';
import { Meter, PricingScheme } from '../../gateway/metering/meter.ts';
import { DEFAULT_WITHDRAW_DELAY } from '../../gateway/payment/channel-terms.ts';

const Timestamp = z.iso.datetime({ offset: true });

export const AgentView = z
  .strictObject({
    id: z.string().regex(/^agt_/),
    tenant_id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    tags: z.array(z.string()),
    metadata: z.record(z.string(), z.unknown()),
    upstream_url: z.string().nullable(),
    credential_ref: z.string().nullable(),
    emit_receipts: z.boolean(),
    capture_body: z.boolean(),
    protocol: z.enum(['http', 'mcp', 'a2a']),
    mcp_transport: z.literal('streamable_http').nullable(),
    mcp_protocol_version: z.string().nullable(),
    pricing: z
      .strictObject({
        amount: z.string(),
        asset: z.literal('USDC'),
        network: z.literal('base'),
        pay_to: z.string().meta({ description: 'EIP-55 checksummed.' }),
        tools: z.record(z.string(), z.string()).optional(),
        methods: z.record(z.string(), z.string()).optional().meta({ description: 'Keyed by the A2A 1.0 method name.' }),
        skills: z.record(z.string(), z.string()).optional(),
        scheme: PricingScheme.optional().meta({ description: 'As set; absent means exact.' }),
        meter: Meter.optional(),
        min_deposit: z.string().optional().meta({ description: 'batch-settlement only: as set; absent when not set.' }),
        withdraw_delay: z
          .int()
          .optional()
          .meta({
            description: `batch-settlement only: the channel's withdrawal delay its challenge offers, in seconds (${DEFAULT_WITHDRAW_DELAY} when not set); absent on other schemes.`,
          }),
      })
      .nullable(),
    a2a_pass_unknown_methods: z.boolean(),
    a2a_skills: z
      .array(z.strictObject({ id: z.string(), name: z.string(), description: z.string(), tags: z.array(z.string()) }))
      .nullable()
      .meta({
        description:
          "protocol a2a: the skills of the upstream's Agent Card as last read (on create and when upstream_url changed); null for other protocols or before a card was read.",
      }),
    a2a_card_url: z.string().nullable().meta({
      description:
        'protocol a2a: where callers read the agent card the gateway serves for it (bearer token); null for other protocols.',
    }),
    status: z
      .enum(['pending', 'active', 'inactive'])
      .meta({ description: 'Derived: inactive once deleted, else active when upstream_url is set, else pending.' }),
    created_by: z.string().meta({ description: 'Subject (user) claim of the token that created the agent.' }),
    rate_limit_rps: z.number().nullable(),
    rate_limit_burst: z
      .int()
      .nullable()
      .meta({ description: 'Token-bucket depth; 20 when only rate_limit_rps is set.' }),
    retry_non_idempotent: z.boolean(),
    suspended: z.boolean(),
    suspended_reason: z.string().nullable(),
    public: z.boolean(),
    public_description: z.string().nullable(),
    public_interface: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({ description: 'As set (PublicInterface): what any caller is shown about calling the public agent.' }),
    public_url: z
      .string()
      .nullable()
      .meta({ description: 'Transactional URL for any x402 client, no token; null unless public and not deleted.' }),
    public_stream_url: z
      .string()
      .nullable()
      .meta({ description: 'Streaming URL for any x402 client, no token; null unless public and not deleted.' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .meta({ id: 'Agent' });

export const AgentList = z
  .strictObject({ data: z.array(AgentView), next_cursor: z.string().nullable() })
  .meta({ id: 'AgentList' });

/** GET /v1/agents: filters and the page. */
export const AgentListQuery = z.object({
  status: z
    .enum(['pending', 'active', 'inactive'], { error: 'status must be pending, active or inactive' })
    .optional()
    .meta({ description: 'Inactive (deleted) agents are listed only with status=inactive.' }),
  tag: maxChars(z.string({ error: 'tag may be given once' }).min(1, 'tag must not be empty'), 100, 'tag is too long')
    .regex(NO_NUL, 'tag must not contain NUL characters')
    .optional()
    .meta({ description: 'Only agents carrying this tag.' }),
  protocol: z.enum(['http', 'mcp', 'a2a'], { error: 'protocol must be http, mcp or a2a' }).optional(),
  ...PageQuery,
});

/** Path of every /v1/agents/{id} operation. */
export const AgentPath = z.object({ id: idParam('agt', 'Agent') });
