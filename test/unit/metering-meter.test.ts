// What a meter is and which pricing objects may carry one (gateway/metering/meter.ts): each
// inconsistent combination is refused under the field that is wrong.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { z } from 'zod';
import {
  Meter,
  meteredPricingError,
  meteredPricingFields,
  PricingScheme,
  refineMeteredPricing,
} from '../../gateway/metering/meter.ts';

const TOKENS = { kind: 'tokens', input_per_1k: '3000', output_per_1k: '15000' };
const HEADER = { kind: 'header', header: 'X-Usage-Cost' };
const fieldOf = (pricing: Record<string, unknown>, protocol?: 'http' | 'mcp' | 'a2a') =>
  meteredPricingError(pricing, protocol)?.field;

describe('metering: the meter and the pricing scheme', () => {
  it('accepts exact without a meter, and upto with either meter', () => {
    for (const pricing of [
      {},
      { scheme: 'exact' },
      { scheme: 'upto', meter: TOKENS },
      { scheme: 'upto', meter: HEADER },
    ])
      assert.equal(meteredPricingError(pricing, 'http'), undefined, JSON.stringify(pricing));
    assert.equal(
      meteredPricingError({ scheme: 'upto', meter: HEADER }, 'mcp'),
      undefined,
      'a header meter on any protocol',
    );
    assert.equal(meteredPricingError({ scheme: 'upto', meter: HEADER }, 'a2a'), undefined);
    assert.equal(meteredPricingError({ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '0' } }), undefined);
    assert.equal(meteredPricingError({ scheme: 'upto', meter: { ...TOKENS, output_per_1k: '0' } }), undefined);
    assert.deepEqual(Meter.parse(TOKENS), TOKENS);
    assert.equal(PricingScheme.parse('upto'), 'upto');
  });

  it('names the field of every inconsistent combination', () => {
    const cases: [Record<string, unknown>, string, ('http' | 'mcp' | 'a2a')?][] = [
      [{ scheme: 'batch' }, 'pricing.scheme'],
      [{ scheme: 1 }, 'pricing.scheme'],
      [{ meter: TOKENS }, 'pricing.meter'],
      [{ scheme: 'exact', meter: HEADER }, 'pricing.meter'],
      [{ scheme: 'upto' }, 'pricing.meter'],
      [{ scheme: 'upto', meter: null }, 'pricing.meter'],
      [{ scheme: 'upto', meter: 'tokens' }, 'pricing.meter'],
      [{ scheme: 'upto', meter: { kind: 'bytes' } }, 'pricing.meter.kind'],
      [{ scheme: 'upto', meter: { header: 'X-Cost' } }, 'pricing.meter.kind'],
      [{ scheme: 'upto', meter: { kind: 'header' } }, 'pricing.meter.header'],
      [{ scheme: 'upto', meter: { ...HEADER, extra: 1 } }, 'pricing.meter'],
      [{ scheme: 'upto', meter: { kind: 'tokens', input_per_1k: '1' } }, 'pricing.meter.output_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: 5 } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '-1' } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '1.5' } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '01' } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: ' 1' } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '' } }, 'pricing.meter.input_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, output_per_1k: (1n << 256n).toString() } }, 'pricing.meter.output_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, output_per_1k: '1'.repeat(100) } }, 'pricing.meter.output_per_1k'],
      [{ scheme: 'upto', meter: { ...TOKENS, input_per_1k: '0', output_per_1k: '0' } }, 'pricing.meter'],
      [{ scheme: 'upto', meter: TOKENS }, 'pricing.meter.kind', 'mcp'],
      [{ scheme: 'upto', meter: TOKENS }, 'pricing.meter.kind', 'a2a'],
    ];
    for (const [pricing, field, protocol] of cases) {
      const problem = meteredPricingError(pricing, protocol);
      assert.ok(problem, JSON.stringify(pricing));
      assert.equal(problem.field, field, JSON.stringify(pricing));
      assert.match(problem.message, /^(unknown field: )?pricing\./);
    }
    const max = ((1n << 256n) - 1n).toString();
    assert.equal(fieldOf({ scheme: 'upto', meter: { ...TOKENS, input_per_1k: max } }), undefined, 'uint256 max');
  });

  it('a header meter names a header that can carry a charge', () => {
    const header = (name: unknown) => fieldOf({ scheme: 'upto', meter: { kind: 'header', header: name } });
    for (const good of ['X-Usage-Cost', 'x-cost', 'Cost', "a!#$%&'*+-.^_`|~9"])
      assert.equal(header(good), undefined, good);
    for (const bad of [
      '',
      'X Cost',
      'X-Cost:',
      'X-Cöst',
      'X-Cost\r\n',
      '(cost)',
      'x'.repeat(129),
      7,
      'Connection',
      'keep-alive',
      'TE',
      'Trailer',
      'Transfer-Encoding',
      'Upgrade',
      'Proxy-Authenticate',
      'Content-Length',
      'X-Gateway-Cost',
      'X-PAYMENT-RESPONSE',
      'Payment-Response',
      'Set-Cookie',
      'X-Request-ID',
    ])
      assert.equal(header(bad), 'pricing.meter.header', JSON.stringify(bad));
  });

  it('only RFC 9110 token names pass (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary-ascii', minLength: 1, maxLength: 20 }), (name) => {
        const ok = fieldOf({ scheme: 'upto', meter: { kind: 'header', header: `X-${name}` } }) === undefined;
        assert.equal(ok, /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name));
      }),
    );
  });

  it('plugs into a pricing object schema: the fields, and the refinement under the field’s path', () => {
    const Pricing = z.strictObject({ amount: z.string(), ...meteredPricingFields }).superRefine(refineMeteredPricing);
    const issue = (input: unknown) => {
      const parsed = Pricing.safeParse(input);
      return parsed.success
        ? undefined
        : { path: parsed.error.issues[0].path.join('.'), message: parsed.error.issues[0].message };
    };
    assert.equal(issue({ amount: '1' }), undefined);
    assert.equal(issue({ amount: '1', scheme: 'upto', meter: TOKENS }), undefined);
    assert.deepEqual(issue({ amount: '1', scheme: 'upto' }), {
      path: 'meter',
      message: 'pricing.scheme upto requires a meter',
    });
    assert.deepEqual(issue({ amount: '1', meter: HEADER }), {
      path: 'meter',
      message: 'pricing.meter requires scheme upto or batch-settlement',
    });
    assert.equal(issue({ amount: '1', scheme: 'upto', meter: { kind: 'header', header: 'TE' } })?.path, 'meter.header');
    assert.equal(
      issue({ amount: '1', scheme: 'upto', meter: { ...TOKENS, input_per_1k: 'x' } })?.path,
      'meter.input_per_1k',
    );
    assert.equal(
      issue({ amount: '1', scheme: 'upto', meter: { ...TOKENS, input_per_1k: '0', output_per_1k: '0' } })?.path,
      'meter',
    );
    assert.equal(issue({ amount: '1', scheme: 'maybe' })?.path, 'scheme');
    // The OpenAPI document is generated from the schemas: the fields must convert.
    const document = z.toJSONSchema(Pricing, { io: 'input' }) as { properties: Record<string, unknown> };
    assert.ok(document.properties.scheme && document.properties.meter);
  });
});
