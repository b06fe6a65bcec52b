// What a metered (x402 `upto`) agent's meter is, and which pricing objects may carry one. The
// payer signs a maximum (the pricing's `amount`); after the call the gateway charges what the
// meter measured, never more than that maximum (./charge.ts). A channel-priced
// (`batch-settlement`) agent may carry one too, for the same reading of each call's charge under
// its ceiling; without one, the ceiling is the charge. Two meters:
// - `header`: the upstream states the call's charge, in the asset's smallest unit, in a response
//   header it names (any protocol);
// - `tokens`: the charge is computed from the token usage the answer reports (OpenAI Chat
//   Completions and Responses, Anthropic Messages; JSON or SSE: ./usage.ts), at a price per
//   thousand input and output tokens.
// The schema checks each field; meteredPricingError checks how scheme, meter and protocol go
// together, which a schema of the pricing object alone cannot see on a PATCH.
import { z } from 'zod';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { EXACT } from '../../x402/schemes/exact/schemas.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';

const UINT256_MAX = (1n << 256n) - 1n;

/** RFC 9110 §5.6.2 token: the characters a field name may hold. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const HEADER_NAME_MAX = 128;

/**
 * Headers that cannot name a charge: hop-by-hop ones (RFC 9110 §7.6.1), which a proxy between
 * the upstream and the gateway may drop or rewrite; the gateway's and x402's own; and integers
 * with another meaning (a body length read as a price would charge by the byte).
 */
const FORBIDDEN_HEADERS = new Set([
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'age',
  'retry-after',
  'set-cookie',
  'x-request-id',
  'x-payment',
  'x-payment-response',
  'payment-required',
  'payment-response',
  'payment-signature',
]);
const FORBIDDEN_PREFIXES = ['proxy-', 'x-gateway-'];

const HEADER_NAME_MESSAGE = `pricing.meter.header must be a header name (RFC 9110 token characters, at most ${HEADER_NAME_MAX})`;

const isForbiddenHeader = (name: string) => {
  const lower = name.toLowerCase();
  return FORBIDDEN_HEADERS.has(lower) || FORBIDDEN_PREFIXES.some((p) => lower.startsWith(p));
};

/** The forbidden names as one JSON Schema pattern (ECMA regex, no flags: each letter in either case), for the document. */
const caseless = (text: string) => text.replace(/[a-z]/g, (c) => `[${c}${c.toUpperCase()}]`);
const FORBIDDEN_PATTERN = `^(?:(?:${[...FORBIDDEN_HEADERS].map(caseless).join('|')})$|${FORBIDDEN_PREFIXES.map(caseless).join('|')})`;

// The refinements run after a failed regex too (zod reports every check), so they must not throw.
const UINT_DIGITS = /^(0|[1-9][0-9]{0,77})$/;
const isUint256 = (value: string) => UINT_DIGITS.test(value) && BigInt(value) <= UINT256_MAX;
const isZero = (value: string) => value === '0';
const perThousand = (field: string) =>
  z
    .string({ error: `pricing.meter.${field} must be a decimal integer string` })
    .regex(UINT_DIGITS, `pricing.meter.${field} must be a decimal integer string (uint256) in the smallest unit`)
    .refine(isUint256, `pricing.meter.${field} must be a decimal integer string (uint256) in the smallest unit`)
    .meta({
      description: `Price of 1000 ${field.startsWith('input') ? 'input' : 'output'} tokens in the asset's smallest unit (uint256, decimal).`,
      example: '1000',
    });

const HeaderMeter = z
  .strictObject({
    kind: z.literal('header'),
    header: z
      .string({ error: 'pricing.meter.header must be a header name' })
      .max(HEADER_NAME_MAX, HEADER_NAME_MESSAGE)
      .regex(TOKEN, HEADER_NAME_MESSAGE)
      .refine(
        (name) => !isForbiddenHeader(name),
        'pricing.meter.header cannot be a hop-by-hop, payment, gateway or length header',
      )
      .meta({
        description:
          "The response header in which the upstream states the call's charge, a decimal integer in the asset's smallest unit. Not hop-by-hop, payment, gateway (X-Gateway-*, Proxy-*) or Content-Length (any case).",
        example: 'X-Usage-Cost',
        not: { pattern: FORBIDDEN_PATTERN },
      }),
  })
  .meta({ id: 'HeaderMeter' });

const TokensMeter = z
  .strictObject({
    kind: z.literal('tokens'),
    input_per_1k: perThousand('input_per_1k'),
    output_per_1k: perThousand('output_per_1k'),
  })
  .refine((m) => !(isZero(m.input_per_1k) && isZero(m.output_per_1k)), {
    message: 'pricing.meter: input_per_1k and output_per_1k cannot both be 0',
  })
  .meta({
    id: 'TokensMeter',
    description:
      'Charge = ceil((input tokens × input_per_1k + output tokens × output_per_1k) / 1000), from the usage the answer reports. input_per_1k and output_per_1k cannot both be 0.',
    not: {
      type: 'object',
      required: ['input_per_1k', 'output_per_1k'],
      properties: { input_per_1k: { const: '0' }, output_per_1k: { const: '0' } },
    },
  });

export const Meter = z
  .discriminatedUnion('kind', [HeaderMeter, TokensMeter], {
    error: 'pricing.meter.kind must be header or tokens',
  })
  .meta({
    id: 'Meter',
    description: 'What measures the actual charge of an `upto` (or metered `batch-settlement`) call.',
  });
export type Meter = z.infer<typeof Meter>;

/**
 * What charges a call: an agent's meter, or `ceiling` (a batch-settlement agent without a meter:
 * an answered call costs its per-call ceiling). Internal, never in the API.
 */
export type ChargeMeter = Meter | { kind: 'ceiling' };

const SCHEME_MESSAGE = `pricing.scheme must be ${EXACT}, ${SCHEME_UPTO} or ${SCHEME_BATCH_SETTLEMENT}`;

export const PricingScheme = z.enum([EXACT, SCHEME_UPTO, SCHEME_BATCH_SETTLEMENT], { error: SCHEME_MESSAGE }).meta({
  description:
    '`exact` (default): the call costs `amount`. `upto`: the payer signs `amount` as a maximum and is charged what `meter` measures, at most that. `batch-settlement`: the payer deposits into a payment channel and pays each call by a voucher of at most `amount`, charged what `meter` measures or, without a meter, `amount`.',
});
export type PricingScheme = z.infer<typeof PricingScheme>;

/**
 * The two pricing fields, to spread into the pricing object's schema. Their combination is
 * checked by refineMeteredPricing (or meteredPricingError on the agent a PATCH leaves).
 */
export const meteredPricingFields = {
  scheme: PricingScheme.optional(),
  meter: Meter.optional().meta({
    description:
      'Required with scheme upto; optional with batch-settlement (absent: the ceiling is the charge); refused otherwise.',
  }),
};

/** What meteredPricingError needs of a pricing object (stored or as sent, before any schema). */
export type MeteredPricingState = { scheme?: unknown; meter?: unknown };
export type MeteredPricingProblem = { field: string; message: string };

/**
 * The first problem with a pricing object's scheme and meter, named by its field
 * (`pricing.scheme`, `pricing.meter`, `pricing.meter.header`, …), or undefined. With the agent's
 * protocol, a tokens meter is refused on MCP and A2A agents, whose answers carry no token usage
 * in a shape the meter reads.
 */
export function meteredPricingError(
  pricing: MeteredPricingState,
  protocol?: 'http' | 'mcp' | 'a2a',
): MeteredPricingProblem | undefined {
  const scheme = pricing.scheme ?? EXACT;
  if (scheme !== EXACT && scheme !== SCHEME_UPTO && scheme !== SCHEME_BATCH_SETTLEMENT)
    return { field: 'pricing.scheme', message: SCHEME_MESSAGE };
  if (scheme === EXACT)
    return pricing.meter === undefined
      ? undefined
      : {
          field: 'pricing.meter',
          message: `pricing.meter requires scheme ${SCHEME_UPTO} or ${SCHEME_BATCH_SETTLEMENT}`,
        };
  if (pricing.meter === undefined)
    return scheme === SCHEME_UPTO
      ? { field: 'pricing.meter', message: 'pricing.scheme upto requires a meter' }
      : undefined;
  const parsed = Meter.safeParse(pricing.meter);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = ['pricing', 'meter', ...issue.path.map(String)].join('.');
    if (issue.code === 'unrecognized_keys')
      return { field, message: `unknown field: ${issue.keys.map((k) => `${field}.${k}`).join(', ')}` };
    return { field, message: issue.message };
  }
  if (parsed.data.kind === 'tokens' && protocol !== undefined && protocol !== 'http')
    return { field: 'pricing.meter.kind', message: 'pricing.meter kind tokens requires protocol http' };
  return undefined;
}

/**
 * A zod refinement for a pricing object schema holding meteredPricingFields
 * (`.superRefine(refineMeteredPricing)`): each field's own rules are the fields' schemas; this
 * adds the combination rules (a meter on exact, upto without meter), under the field's path.
 */
export function refineMeteredPricing(pricing: MeteredPricingState, ctx: z.RefinementCtx): void {
  const problem = meteredPricingError(pricing);
  if (problem) ctx.addIssue({ code: 'custom', path: problem.field.split('.').slice(1), message: problem.message });
}
