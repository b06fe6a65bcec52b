// Retry timing of upstream calls (gateway/upstream/retry.ts): full-jitter backoff drawn from
// [0, min(cap, base·2^n)), and Retry-After read as delta-seconds or an HTTP date against an
// injected clock.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { fullJitterDelay, parseRetryAfter } from '../../gateway/upstream/retry.ts';

describe('upstream retry timing', () => {
  it('draws full-jitter waits from [0, min(cap, base·2^n))', () => {
    const opts = { maxAttempts: 10, baseMs: 100, capMs: 1_000 };
    assert.equal(
      fullJitterDelay(0, opts, () => 0),
      0,
    );
    assert.equal(
      fullJitterDelay(0, opts, () => 0.999),
      99,
    );
    assert.equal(
      fullJitterDelay(3, opts, () => 0.5),
      400,
    );
    assert.equal(
      fullJitterDelay(8, opts, () => 0.999),
      999,
      'capped',
    );
  });

  it('stays within its bound for every retry and every draw (property)', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 60 }),
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 1, max: 120_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (retry, baseMs, capMs, draw) => {
          const wait = fullJitterDelay(retry, { maxAttempts: 100, baseMs, capMs }, () => draw);
          assert.ok(Number.isInteger(wait) && wait >= 0);
          assert.ok(wait < Math.min(capMs, baseMs * 2 ** retry));
        },
      ),
    );
  });

  it('reads Retry-After as seconds or as an HTTP date, never as a wait in the past', () => {
    const now = Date.UTC(2026, 0, 2, 3, 4, 5);
    assert.equal(parseRetryAfter('3', now), 3000);
    assert.equal(parseRetryAfter(' 0 ', now), 0);
    assert.equal(parseRetryAfter(['7', '9'], now), 7000);
    assert.equal(parseRetryAfter('Fri, 02 Jan 2026 03:04:10 GMT', now), 5000);
    assert.equal(parseRetryAfter('Fri, 02 Jan 2026 03:04:00 GMT', now), 0);
    for (const unreadable of ['soon', '', undefined, []])
      assert.equal(parseRetryAfter(unreadable, now), undefined, JSON.stringify(unreadable));
  });
});
