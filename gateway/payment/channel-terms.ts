// What a channel-priced (x402 `batch-settlement`) agent's pricing adds to a per-call ceiling: the
// terms of the payment channel its challenge offers. `min_deposit` is the least a payer deposits
// into its channel (the challenge's `extra.minDeposit`); a deposit smaller than one call's
// ceiling could not pay for that call (and @x402/evm's client ignores such a hint), so it is at
// least every ceiling the pricing names. `withdraw_delay` is how long the payer waits between
// asking for its unclaimed deposit back and taking it (the channel config's `withdrawDelay`,
// within the channel contract's bounds), stored with its default when not given, so the agent
// reads back what its challenge offers. No other scheme takes either.
import { z } from 'zod';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY } from '../../x402/schemes/batch-settlement/typed-data.ts';
import type { Pricing } from '../db/entities.ts';
import type { MeteredPricingProblem } from '../metering/meter.ts';

/** The withdrawal delay a channel is offered when the pricing names none: one day. */
export const DEFAULT_WITHDRAW_DELAY = 86_400;

const UINT256_MAX = (1n << 256n) - 1n;
const POSITIVE_DIGITS = /^[1-9][0-9]{0,77}$/;
const MIN_DEPOSIT_MESSAGE =
  "pricing.min_deposit must be a positive decimal integer string (uint256) in the asset's smallest unit";
const WITHDRAW_DELAY_MESSAGE = `pricing.withdraw_delay must be an integer number of seconds from ${MIN_WITHDRAW_DELAY} to ${MAX_WITHDRAW_DELAY}`;

/** The two fields, to spread into the pricing object's schema; their combination is channelTermsError's. */
export const channelTermsFields = {
  min_deposit: z
    .string({ error: MIN_DEPOSIT_MESSAGE })
    .regex(POSITIVE_DIGITS, MIN_DEPOSIT_MESSAGE)
    // Runs after a failed regex too (zod reports every check), so it must not throw.
    .refine((value) => !POSITIVE_DIGITS.test(value) || BigInt(value) <= UINT256_MAX, MIN_DEPOSIT_MESSAGE)
    .optional()
    .meta({
      description:
        "scheme batch-settlement only: the least a payer deposits into its channel, in the asset's smallest unit (the challenge's `extra.minDeposit`). At least `amount` and every price in `tools`, `methods` and `skills` (else 400). Absent: the challenge announces none.",
      example: '1000000',
    }),
  withdraw_delay: z
    .int({ error: WITHDRAW_DELAY_MESSAGE })
    .min(MIN_WITHDRAW_DELAY, WITHDRAW_DELAY_MESSAGE)
    .max(MAX_WITHDRAW_DELAY, WITHDRAW_DELAY_MESSAGE)
    .optional()
    .meta({
      description: `scheme batch-settlement only: seconds a payer waits between asking for its unclaimed deposit back and taking it (the channel's \`withdrawDelay\`), ${MIN_WITHDRAW_DELAY} to ${MAX_WITHDRAW_DELAY}. Absent: ${DEFAULT_WITHDRAW_DELAY}, stored and read back.`,
      example: DEFAULT_WITHDRAW_DELAY,
    }),
};

/** What channelTermsError reads of a pricing object (stored, or as the schema took it). */
export type ChannelTermsState = Pick<Pricing, 'amount' | 'tools' | 'methods' | 'skills'> & {
  scheme?: unknown;
  min_deposit?: unknown;
  withdraw_delay?: unknown;
};

/** The per-call prices a pricing object names besides its `amount`, by the field that holds them. */
const PRICE_MAPS = ['tools', 'methods', 'skills'] as const;

const isDigits = (value: unknown): value is string => typeof value === 'string' && /^[0-9]{1,78}$/.test(value);

/**
 * The first problem with a pricing object's channel terms, named by its field, or undefined:
 * either term on a scheme other than batch-settlement, or a min_deposit below a call's ceiling.
 * Each term's own form is its schema's (channelTermsFields).
 */
export function channelTermsError(pricing: ChannelTermsState): MeteredPricingProblem | undefined {
  if (pricing.scheme !== SCHEME_BATCH_SETTLEMENT) {
    const field = (['min_deposit', 'withdraw_delay'] as const).find((key) => pricing[key] !== undefined);
    return (
      field && { field: `pricing.${field}`, message: `pricing.${field} requires scheme ${SCHEME_BATCH_SETTLEMENT}` }
    );
  }
  const { min_deposit: minDeposit } = pricing;
  if (!isDigits(minDeposit)) return undefined;
  const floor = BigInt(minDeposit);
  if (isDigits(pricing.amount) && floor < BigInt(pricing.amount))
    return {
      field: 'pricing.min_deposit',
      message: 'pricing.min_deposit must be at least pricing.amount (a smaller deposit cannot pay for one call)',
    };
  const above = PRICE_MAPS.find((key) =>
    Object.values(pricing[key] ?? {}).some((price) => isDigits(price) && floor < BigInt(price)),
  );
  return (
    above && {
      field: 'pricing.min_deposit',
      message: `pricing.min_deposit must be at least every price in pricing.${above}`,
    }
  );
}

/**
 * A zod refinement for a pricing object schema holding channelTermsFields
 * (`.superRefine(refineChannelTerms)`): channelTermsError under the field's path.
 */
export function refineChannelTerms(pricing: ChannelTermsState, ctx: z.RefinementCtx): void {
  const problem = channelTermsError(pricing);
  if (problem) ctx.addIssue({ code: 'custom', path: problem.field.split('.').slice(1), message: problem.message });
}

/** The pricing as stored: a batch-settlement one states the withdrawal delay its challenge offers. */
export function withChannelDefaults(pricing: Pricing): Pricing {
  if (pricing.scheme !== SCHEME_BATCH_SETTLEMENT || pricing.withdraw_delay !== undefined) return pricing;
  return { ...pricing, withdraw_delay: DEFAULT_WITHDRAW_DELAY };
}
