// A channel-priced (x402 batch-settlement) agent's channel terms (gateway/payment/channel-terms.ts):
// which pricing objects take them, their bounds, the floor min_deposit keeps, the default the
// stored pricing states, and what a call's price carries of them (gateway/payment/pricing.ts).
import assert from 'node:assert/strict';
import { z } from 'zod';
import {
  channelTermsError,
  channelTermsFields,
  DEFAULT_WITHDRAW_DELAY,
  refineChannelTerms,
  withChannelDefaults,
} from '../../gateway/payment/channel-terms.ts';
import { meteredPricingError } from '../../gateway/metering/meter.ts';
import { priceOf } from '../../gateway/payment/pricing.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY } from '../../x402/schemes/batch-settlement/typed-data.ts';
import type { Pricing } from '../../gateway/db/entities.ts';

const BASE = { amount: '1000', asset: 'USDC', network: 'base', pay_to: '0x' + '22'.repeat(20) } as const;
const batch = (extra: Partial<Pricing> = {}): Pricing => ({ ...BASE, scheme: SCHEME_BATCH_SETTLEMENT, ...extra });
const HEADER = { kind: 'header', header: 'X-Usage-Cost' } as const;

describe('payment: channel terms of a batch-settlement price', () => {
  it('are batch-settlement’s alone: on exact (named or not) or upto, either is refused under its field', () => {
    for (const scheme of [undefined, 'exact', 'upto'] as const) {
      assert.deepEqual(channelTermsError({ ...BASE, scheme, min_deposit: '1000' }), {
        field: 'pricing.min_deposit',
        message: 'pricing.min_deposit requires scheme batch-settlement',
      });
      assert.deepEqual(channelTermsError({ ...BASE, scheme, withdraw_delay: 900 }), {
        field: 'pricing.withdraw_delay',
        message: 'pricing.withdraw_delay requires scheme batch-settlement',
      });
      assert.equal(channelTermsError({ ...BASE, scheme }), undefined);
    }
    assert.equal(channelTermsError(batch()), undefined, 'both optional');
    assert.equal(channelTermsError(batch({ min_deposit: '1000', withdraw_delay: MAX_WITHDRAW_DELAY })), undefined);
  });

  it('keep min_deposit at least every per-call ceiling: amount, tools, methods and skills', () => {
    const problem = (extra: Partial<Pricing>) => channelTermsError(batch(extra))?.message;
    assert.match(problem({ min_deposit: '999' }) ?? '', /^pricing\.min_deposit must be at least pricing\.amount/);
    assert.equal(problem({ min_deposit: '1000' }), undefined, 'equal to the ceiling');
    assert.equal(problem({ amount: '9', min_deposit: '10' }), undefined, 'compared as integers, not strings');
    assert.match(problem({ amount: '10', min_deposit: '9' }) ?? '', /pricing\.amount/);
    for (const key of ['tools', 'methods', 'skills'] as const) {
      assert.equal(
        problem({ min_deposit: '5000', [key]: { a: '0', b: '5000' } }),
        undefined,
        `${key}: up to min_deposit`,
      );
      assert.equal(
        problem({ min_deposit: '5000', [key]: { a: '0', b: '5001' } }),
        `pricing.min_deposit must be at least every price in pricing.${key}`,
      );
    }
    assert.equal(problem({ tools: { big: '99999' } }), undefined, 'no min_deposit: nothing to keep');
  });

  it('take only a positive uint256 min_deposit and a withdraw_delay within the channel contract’s bounds', () => {
    const Terms = z.strictObject({ amount: z.string(), scheme: z.string().optional(), ...channelTermsFields });
    const issue = (input: Record<string, unknown>) => {
      const parsed = Terms.safeParse({ amount: '1', scheme: SCHEME_BATCH_SETTLEMENT, ...input });
      return parsed.success ? undefined : parsed.error.issues[0].path.join('.');
    };
    const max = ((1n << 256n) - 1n).toString();
    for (const good of ['1', '1000000', max]) assert.equal(issue({ min_deposit: good }), undefined, good);
    for (const bad of ['0', '-1', '01', '1.5', ' 1', '', '1e6', (1n << 256n).toString(), 5, null])
      assert.equal(issue({ min_deposit: bad }), 'min_deposit', JSON.stringify(bad));
    for (const good of [MIN_WITHDRAW_DELAY, DEFAULT_WITHDRAW_DELAY, MAX_WITHDRAW_DELAY])
      assert.equal(issue({ withdraw_delay: good }), undefined, String(good));
    for (const bad of [MIN_WITHDRAW_DELAY - 1, MAX_WITHDRAW_DELAY + 1, 86_400.5, '86400', null, -1])
      assert.equal(issue({ withdraw_delay: bad }), 'withdraw_delay', JSON.stringify(bad));
    assert.equal(MIN_WITHDRAW_DELAY, 900);
    assert.equal(MAX_WITHDRAW_DELAY, 2_592_000);
  });

  it('plug into a pricing object schema: the refinement under the field’s path', () => {
    const Pricing = z
      .strictObject({ amount: z.string(), scheme: z.string().optional(), ...channelTermsFields })
      .superRefine(refineChannelTerms);
    const issue = (input: unknown) => {
      const parsed = Pricing.safeParse(input);
      return parsed.success
        ? undefined
        : { path: parsed.error.issues[0].path.join('.'), message: parsed.error.issues[0].message };
    };
    assert.equal(issue({ amount: '10', scheme: SCHEME_BATCH_SETTLEMENT, min_deposit: '10' }), undefined);
    assert.deepEqual(issue({ amount: '10', withdraw_delay: 900 }), {
      path: 'withdraw_delay',
      message: 'pricing.withdraw_delay requires scheme batch-settlement',
    });
    assert.equal(issue({ amount: '10', scheme: SCHEME_BATCH_SETTLEMENT, min_deposit: '9' })?.path, 'min_deposit');
  });

  it('go with a meter or none: batch-settlement takes a meter optionally, by the same rules as upto', () => {
    assert.equal(meteredPricingError({ scheme: SCHEME_BATCH_SETTLEMENT }), undefined, 'the ceiling is the charge');
    assert.equal(meteredPricingError({ scheme: SCHEME_BATCH_SETTLEMENT, meter: HEADER }, 'mcp'), undefined);
    assert.equal(
      meteredPricingError({ scheme: SCHEME_BATCH_SETTLEMENT, meter: { kind: 'bytes' } })?.field,
      'pricing.meter.kind',
    );
    const tokens = { kind: 'tokens', input_per_1k: '1', output_per_1k: '1' };
    assert.equal(meteredPricingError({ scheme: SCHEME_BATCH_SETTLEMENT, meter: tokens }, 'http'), undefined);
    assert.equal(
      meteredPricingError({ scheme: SCHEME_BATCH_SETTLEMENT, meter: tokens }, 'a2a')?.field,
      'pricing.meter.kind',
    );
    assert.equal(
      meteredPricingError({ scheme: 'batch' })?.message,
      'pricing.scheme must be exact, upto or batch-settlement',
    );
    assert.equal(
      meteredPricingError({ meter: HEADER })?.message,
      'pricing.meter requires scheme upto or batch-settlement',
    );
  });

  it('are stored with the withdrawal delay the challenge offers; other schemes are left as they are', () => {
    assert.deepEqual(withChannelDefaults(batch()), batch({ withdraw_delay: DEFAULT_WITHDRAW_DELAY }));
    assert.equal(DEFAULT_WITHDRAW_DELAY, 86_400);
    const set = batch({ withdraw_delay: 900, min_deposit: '5000' });
    assert.deepEqual(withChannelDefaults(set), set);
    for (const pricing of [
      { ...BASE },
      { ...BASE, scheme: 'exact' as const },
      { ...BASE, scheme: 'upto' as const, meter: HEADER },
    ]) {
      const stored = withChannelDefaults(pricing);
      assert.deepEqual(stored, pricing);
      assert.ok(!Object.hasOwn(stored, 'withdraw_delay'));
    }
  });

  it('are carried by a call’s price: the agent’s min_deposit and delay, the call’s own ceiling', () => {
    const agent = (pricing: Pricing, protocol: 'http' | 'mcp' = 'http') => ({ name: 'a', protocol, pricing });
    const price = priceOf({ agent: agent(batch({ min_deposit: '5000', withdraw_delay: 900 })), mcp: null });
    assert.equal(price?.scheme, SCHEME_BATCH_SETTLEMENT);
    assert.equal(price?.amount, '1000');
    assert.equal(price?.minDeposit, '5000');
    assert.equal(price?.withdrawDelay, 900);
    const tool = priceOf({
      agent: agent(batch({ tools: { search: '3000' }, min_deposit: '5000' }), 'mcp'),
      mcp: { method: 'tools/call', tool: 'search' },
    });
    assert.equal(tool?.amount, '3000');
    assert.equal(tool?.minDeposit, '5000');
    // A pricing without a stored delay (the API always stores one): the default still.
    const bare = priceOf({ agent: agent(batch()), mcp: null });
    assert.equal(bare?.withdrawDelay, DEFAULT_WITHDRAW_DELAY);
    assert.ok(bare && !Object.hasOwn(bare, 'minDeposit'), 'no min_deposit: none announced');
    for (const pricing of [{ ...BASE }, { ...BASE, scheme: 'upto' as const, meter: HEADER }]) {
      const other = priceOf({ agent: agent(pricing), mcp: null });
      assert.ok(other && !Object.hasOwn(other, 'minDeposit') && !Object.hasOwn(other, 'withdrawDelay'));
    }
  });
});
