// The one reading of `since` and `until` (api/query-time.ts): RFC 3339 date-times with a zone,
// real days only, a `+` offset that form decoding turned into a space read as the `+` it was,
// and a 400 naming the parameter for anything else (given twice, not a date-time, since after
// until).
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SINCE_AFTER_UNTIL, timeWindow } from '../../api/query-time.ts';
import { ApiError } from '../../lib/http-error.ts';

const since = (value: unknown) => timeWindow({ since: value }).since;

function refused(query: Record<string, unknown>, message: string | RegExp) {
  assert.throws(
    () => timeWindow(query),
    (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 400);
      if (typeof message === 'string') assert.equal(err.message, message);
      else assert.match(err.message, message);
      return true;
    },
    JSON.stringify(query),
  );
}

describe('since and until', () => {
  it('reads RFC 3339 date-times in every zone form the RFC allows', () => {
    const instant = Date.UTC(2026, 0, 2, 3, 4, 5);
    for (const text of [
      '2026-01-02T03:04:05Z',
      '2026-01-02t03:04:05z',
      '2026-01-02 03:04:05Z',
      '2026-01-02T04:04:05+01:00',
      '2026-01-01T22:34:05-04:30',
      '2026-01-02T03:04:05+00:00',
      '2026-01-02T03:04:05-00:00',
    ])
      assert.equal(since(text)?.getTime(), instant, text);
    assert.equal(since('2026-01-02T03:04:05.123456Z')?.getTime(), instant + 123);
  });

  it('reads an unencoded + offset, which arrives as a space, as the + it was', () => {
    assert.equal(since('2026-01-02T04:04:05 01:00')?.getTime(), Date.UTC(2026, 0, 2, 3, 4, 5));
  });

  it('counts a leap second as :59 of the same minute', () => {
    assert.equal(since('2016-12-31T23:59:60Z')?.getTime(), Date.UTC(2016, 11, 31, 23, 59, 59));
    assert.equal(since('2016-12-31T23:59:60.5Z')?.getTime(), Date.UTC(2016, 11, 31, 23, 59, 59, 500));
  });

  it('takes an absent or empty parameter as no bound', () => {
    assert.deepEqual(timeWindow({}), { since: undefined, until: undefined });
    assert.deepEqual(timeWindow({ since: '', until: '' }), { since: undefined, until: undefined });
  });

  it('answers 400 naming the parameter for what is not an RFC 3339 date-time or names no real day', () => {
    for (const text of [
      '2026-01-02',
      '2026-01-02T03:04:05',
      '2026-01-02T03:04Z',
      '2026-1-2T03:04:05Z',
      '2026-02-29T00:00:00Z',
      '2024-02-30T00:00:00Z',
      '2026-04-31T00:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-00-01T00:00:00Z',
      '2026-01-00T00:00:00Z',
      '2026-01-02T24:00:00Z',
      '2026-01-02T03:60:00Z',
      '2026-01-02T03:04:61Z',
      '2026-01-02T03:04:05+24:00',
      '2026-01-02T03:04:05+01:60',
      '0000-01-01T00:00:00Z',
      '1767322445',
      'yesterday',
      '2026-01-02T03:04:05Z ',
      ' 2026-01-02T03:04:05Z',
      '2026-01-02T03:04:05.Z',
      '2026-01-02T03:04:05+0100',
    ]) {
      refused({ since: text }, 'since must be an RFC 3339 date-time');
      refused({ until: text }, 'until must be an RFC 3339 date-time');
    }
    assert.equal(since('2024-02-29T00:00:00Z')?.getTime(), Date.UTC(2024, 1, 29));
  });

  it('answers 400 for a parameter given twice, and for since after until (equal is a window of one instant)', () => {
    refused({ since: ['2026-01-02T03:04:05Z', '2026-01-03T03:04:05Z'] }, 'since may be given once');
    refused({ until: ['a', 'b'] }, 'until may be given once');
    refused({ since: '2026-01-02T03:04:06Z', until: '2026-01-02T03:04:05Z' }, SINCE_AFTER_UNTIL);
    // The same instant in two zones is not "after".
    const same = timeWindow({ since: '2026-01-02T04:04:05+01:00', until: '2026-01-02T03:04:05Z' });
    assert.equal(same.since?.getTime(), same.until?.getTime());
  });

  it('reads every instant back from its ISO form in any whole-minute offset (property)', () => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date('0001-01-02T00:00:00Z'), max: new Date('9999-12-30T00:00:00Z'), noInvalidDate: true }),
        fc.integer({ min: -(23 * 60 + 59), max: 23 * 60 + 59 }),
        fc.constantFrom('T', 't', ' '),
        (date, offsetMinutes, separator) => {
          const local = new Date(date.getTime() + offsetMinutes * 60_000).toISOString().slice(0, 23);
          const sign = offsetMinutes < 0 ? '-' : '+';
          const abs = Math.abs(offsetMinutes);
          const zone = `${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
          const text = local.slice(0, 10) + separator + local.slice(11) + zone;
          assert.equal(since(text)?.getTime(), date.getTime(), text);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('answers any text with an instant or a 400, never anything else (property)', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (text) => {
        try {
          const window = timeWindow({ since: text });
          if (text !== '') assert.ok(window.since instanceof Date && !Number.isNaN(window.since.getTime()));
        } catch (err) {
          assert.ok(err instanceof ApiError && err.status === 400);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
