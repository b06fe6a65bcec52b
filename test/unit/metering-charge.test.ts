// What a metered call costs (gateway/metering/charge.ts): the measured amount rounded up, never
// above the signed maximum (and said when cut), and 0 for a call never forwarded, a failed
// upstream, an answer saying the request failed or an answer without a reading.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { chargeFor, type UpstreamOutcome } from '../../gateway/metering/charge.ts';
import type { Meter } from '../../gateway/metering/meter.ts';
import type { MeterReading } from '../../gateway/metering/reader.ts';

const OK: UpstreamOutcome = { kind: 'answered', status: 200, complete: true };
const tokens = (input: string, output: string): Meter => ({
  kind: 'tokens',
  input_per_1k: input,
  output_per_1k: output,
});
const HEADER: Meter = { kind: 'header', header: 'X-Usage-Cost' };
const usage = (input: number, output: number): MeterReading => ({ kind: 'usage', input, output });
const amount = (n: bigint): MeterReading => ({ kind: 'amount', amount: n });
const MAX = 1_000_000n;

describe('metering: the charge', () => {
  it('tokens: ceil((input × input_per_1k + output × output_per_1k) / 1000)', () => {
    const meter = tokens('3', '15');
    assert.deepEqual(chargeFor(usage(0, 0), meter, MAX, OK), { charge: 0n, capped: false, reason: 'measured' });
    assert.equal(chargeFor(usage(1, 0), meter, MAX, OK).charge, 1n, '0.003 rounds up to 1');
    assert.equal(chargeFor(usage(1000, 0), meter, MAX, OK).charge, 3n);
    assert.equal(chargeFor(usage(1000, 1000), meter, MAX, OK).charge, 18n);
    assert.equal(chargeFor(usage(1001, 0), meter, MAX, OK).charge, 4n, '3.003 rounds up to 4');
    assert.equal(chargeFor(usage(333, 1), tokens('3', '1'), MAX, OK).charge, 1n, 'exactly 1.000');
    assert.equal(chargeFor(usage(334, 0), tokens('3', '0'), MAX, OK).charge, 2n, '1.002 rounds up');
    const huge = (1n << 256n) - 1n;
    assert.deepEqual(
      chargeFor(usage(1_000_000_000, 1_000_000_000), tokens(huge.toString(), huge.toString()), huge, OK),
      { charge: huge, capped: true, reason: 'measured' },
      'no overflow: bigint throughout',
    );
  });

  it('never above the maximum: a larger reading is cut to it and said to be', () => {
    assert.deepEqual(chargeFor(amount(MAX + 1n), HEADER, MAX, OK), { charge: MAX, capped: true, reason: 'measured' });
    assert.deepEqual(chargeFor(amount(MAX), HEADER, MAX, OK), { charge: MAX, capped: false, reason: 'measured' });
    assert.deepEqual(chargeFor(usage(10_000_000, 0), tokens('1000', '0'), MAX, OK), {
      charge: MAX,
      capped: true,
      reason: 'measured',
    });
    assert.deepEqual(chargeFor(amount(5n), HEADER, 0n, OK), { charge: 0n, capped: true, reason: 'measured' });
  });

  it('0 for a call never forwarded, a failed upstream (no answer, 5xx) and an answer without a reading', () => {
    const free = (reason: string) => ({ charge: 0n, capped: false, reason });
    assert.deepEqual(chargeFor(amount(5n), HEADER, MAX, { kind: 'not_forwarded' }), free('not_forwarded'));
    assert.deepEqual(chargeFor(amount(5n), HEADER, MAX, { kind: 'failed' }), free('upstream_failed'));
    for (const status of [500, 502, 503, 504, 599])
      assert.deepEqual(
        chargeFor(amount(5n), HEADER, MAX, { kind: 'answered', status, complete: true }),
        free('upstream_failed'),
      );
    assert.deepEqual(
      chargeFor(amount(5n), HEADER, MAX, { ...OK, requestFailed: true }),
      free('request_failed'),
      'an MCP answer saying the request failed',
    );
    assert.deepEqual(
      chargeFor({ kind: 'none' }, { kind: 'ceiling' }, MAX, { ...OK, complete: false, requestFailed: true }),
      free('request_failed'),
      'a channel call charged its ceiling too',
    );
    assert.deepEqual(chargeFor({ kind: 'none' }, HEADER, MAX, OK), free('no_reading'));
    assert.deepEqual(chargeFor(usage(1, 1), HEADER, MAX, OK), free('no_reading'), 'a reading of the other meter');
    assert.deepEqual(chargeFor(amount(5n), tokens('1', '1'), MAX, OK), free('no_reading'));
  });

  it('a 4xx answer is charged what it reports; an answer broken off, what was read before the break', () => {
    assert.deepEqual(chargeFor(amount(5n), HEADER, MAX, { kind: 'answered', status: 429, complete: true }), {
      charge: 5n,
      capped: false,
      reason: 'measured',
    });
    assert.deepEqual(
      chargeFor(usage(25, 1), tokens('1000', '1000'), MAX, { kind: 'answered', status: 200, complete: false }),
      {
        charge: 26n,
        capped: false,
        reason: 'interrupted',
      },
    );
  });

  it('the charge is min(ceil(measured), maximum), never negative (property)', () => {
    const count = fc.nat({ max: 1_000_000_000 });
    const units = fc.bigInt({ min: 0n, max: (1n << 128n) - 1n });
    fc.assert(
      fc.property(count, count, units, units, fc.bigInt({ min: 0n, max: 1n << 200n }), (i, o, pi, po, max) => {
        const { charge, capped } = chargeFor(usage(i, o), tokens(pi.toString(), po.toString()), max, OK);
        const milli = BigInt(i) * pi + BigInt(o) * po;
        const exact = milli / 1000n + (milli % 1000n === 0n ? 0n : 1n);
        assert.equal(charge, exact > max ? max : exact);
        assert.equal(capped, exact > max);
        assert.ok(charge >= 0n && charge <= max);
      }),
    );
  });
});
