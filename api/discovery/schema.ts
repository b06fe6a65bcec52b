// The discovery endpoints' query parameters and answers (x402 specs/extensions/bazaar.md,
// "Optional Discovery Endpoints"; the shapes @x402/extensions' `withBazaar` client reads). The
// OpenAPI document is generated from these.
import { z } from 'zod';
import { maxChars } from '../validation.ts';

/** Page size: default 20, clamped to [1, 100] (an out-of-range value is not refused). */
const DISCOVERY_DEFAULT_LIMIT = 20;
const DISCOVERY_MAX_LIMIT = 100;
/** The furthest a page may start: past the catalog's bound anyway. */
const MAX_OFFSET = 1_000_000;

const filterString = (name: string, description: string) =>
  maxChars(z.string({ error: `${name} may be given once` }), 200, `${name} is too long`)
    .optional()
    .meta({ description });

const Filters = {
  type: filterString('type', 'Only resources of this type: `http` or `mcp`.'),
  payTo: filterString('payTo', 'Only resources paid to this address (case-insensitive).'),
  scheme: filterString('scheme', 'Only resources payable in this scheme (`exact`).'),
  network: filterString('network', 'Only resources payable on this network, in CAIP-2 (`eip155:8453`).'),
  extensions: filterString('extensions', 'Only resources declaring this extension (`bazaar`).'),
  limit: z
    .int({ error: 'limit must be an integer' })
    .optional()
    .meta({ description: `Page size, default ${DISCOVERY_DEFAULT_LIMIT}; clamped to [1, ${DISCOVERY_MAX_LIMIT}].` }),
};

export const DiscoveryListQuery = z.object({
  ...Filters,
  offset: z
    .int({ error: 'offset must be an integer' })
    .min(0, 'offset must not be negative')
    .max(MAX_OFFSET, `offset may be at most ${MAX_OFFSET}`)
    .optional()
    .meta({ description: 'How many matching resources to skip, default 0.' }),
});

export const DiscoverySearchQuery = z.object({
  query: maxChars(z.string({ error: 'query is required' }).min(1, 'query is required'), 500, 'query is too long').meta({
    description: "Words that must all appear in the resource's name, description or tool (case-insensitive).",
  }),
  ...Filters,
  cursor: z
    .string({ error: 'cursor may be given once' })
    .regex(/^[0-9]{1,7}$/, 'invalid cursor')
    .optional()
    .meta({ description: '`pagination.cursor` of the previous page; any other value is a 400.' }),
});

export const clampDiscoveryLimit = (limit: number | undefined) =>
  limit === undefined ? DISCOVERY_DEFAULT_LIMIT : Math.min(DISCOVERY_MAX_LIMIT, Math.max(1, limit));

const PaymentRequirements = z
  .object({
    scheme: z.string(),
    network: z.string(),
    amount: z.string(),
    asset: z.string(),
    payTo: z.string(),
    maxTimeoutSeconds: z.int(),
    extra: z.record(z.string(), z.unknown()),
  })
  .meta({ id: 'DiscoveryPaymentRequirements', description: 'x402 v2 payment requirements.' });

export const DiscoveryResource = z
  .object({
    resource: z.string().meta({ description: "The agent's public streaming URL." }),
    type: z.enum(['http', 'mcp']),
    x402Version: z.literal(2),
    accepts: z.array(PaymentRequirements),
    lastUpdated: z.iso.datetime({ offset: true }),
    description: z.string().optional(),
    mimeType: z.string().optional(),
    serviceName: z.string().optional(),
    extensions: z.record(z.string(), z.unknown()).optional().meta({ description: 'The `bazaar` extension.' }),
  })
  .meta({ id: 'DiscoveryResource' });

export const DiscoveryResourcesResponse = z
  .object({
    x402Version: z.literal(2),
    items: z.array(DiscoveryResource),
    pagination: z.object({ limit: z.int(), offset: z.int(), total: z.int() }),
  })
  .meta({ id: 'DiscoveryResources' });

export const DiscoverySearchResponse = z
  .object({
    x402Version: z.literal(2),
    resources: z.array(DiscoveryResource),
    partialResults: z.boolean(),
    pagination: z.object({ limit: z.int(), cursor: z.string().nullable() }),
  })
  .meta({ id: 'DiscoverySearch' });
