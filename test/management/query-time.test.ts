// Every timestamp a caller can send (since/until on the three endpoints that take them, and the
// instant inside an invocation-list cursor) is read once (api/query-time.ts) and bounded to
// years 0001-9999 in UTC: an offset that carries a written year-1 or year-9999 date out of that
// range is a 400, never a database error.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { timeWindow } from '../../api/query-time.ts';
import { ApiError } from '../../lib/http-error.ts';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';

/** The 400 message timeWindow gives for `since`, or null when it accepts it. */
function refusal(since: string): string | null {
  try {
    timeWindow({ since });
    return null;
  } catch (err) {
    assert.ok(err instanceof ApiError && err.status === 400, `a 400, not ${String(err)}`);
    return err.message;
  }
}

const BEFORE_YEAR_1 = [
  '0001-01-01T00:00:53.38+17:20',
  '0001-01-01T00:00:00+00:01',
  '0001-01-01T00:00:00.000001+23:59',
  // An unencoded `+` in a URL is a space once decoded; it is read as the offset it was.
  '0001-01-01T00:00:53.38 17:20',
];
const AFTER_YEAR_9999 = ['9999-12-31T23:59:59-00:01', '9999-12-31T20:00:00-05:00', '9999-12-31t23:59:60.5-23:59'];
const EDGES = [
  '0001-01-01T00:00:00Z',
  '0001-01-01T17:20:00+17:20',
  '0001-01-01T00:00:00-23:59',
  '9999-12-31T23:59:59.999Z',
  '9999-12-31T23:59:60Z',
  '9999-12-31T00:00:00+23:59',
];

describe('timestamps a caller sends are bounded to years 0001-9999 (UTC)', () => {
  describe('api/query-time.ts', () => {
    for (const value of [...BEFORE_YEAR_1, ...AFTER_YEAR_9999])
      it(`${value} is a 400 naming the range`, () => {
        assert.match(refusal(value) ?? 'accepted', /^since must lie between years 0001 and 9999 in UTC$/);
      });
    for (const value of EDGES)
      it(`${value} is accepted`, () => {
        assert.equal(refusal(value), null);
      });
    it('until is bounded the same way', () => {
      assert.throws(() => timeWindow({ until: '9999-12-31T23:59:59-00:01' }), /until must lie between/);
    });
  });

  describe('over HTTP', () => {
    let token: string;
    before(async () => {
      token = await stack().token(`query-time-${randomUUID()}`);
    });

    const encoded = (value: string) => encodeURIComponent(value);
    const paths = [
      (q: string) => `/v1/invocations?${q}`,
      (q: string) => `/v1/policy/decisions?${q}`,
      (q: string) => `/v1/analytics?${q}`,
    ];

    it('a since before year 1 or an until after year 9999 is a 400 {error} on all three endpoints', async () => {
      for (const path of paths) {
        for (const value of BEFORE_YEAR_1) {
          // As the fuzzer sent it (`%2B`), and as a caller typing the `+` unencoded would.
          const q = value.includes(' ') ? `since=${value.replace(' ', '+')}` : `since=${encoded(value)}`;
          const res = await call('GET', path(q), { token });
          assert.equal(res.status, 400, `${path(q)}: ${res.status} ${res.text}`);
          assert.deepEqual(res.json, { error: 'since must lie between years 0001 and 9999 in UTC' });
        }
        for (const value of AFTER_YEAR_9999) {
          const q = `since=9999-12-01T00:00:00Z&until=${encoded(value)}`;
          const res = await call('GET', path(q), { token });
          assert.equal(res.status, 400, `${path(q)}: ${res.status} ${res.text}`);
          assert.deepEqual(res.json, { error: 'until must lie between years 0001 and 9999 in UTC' });
        }
      }
    });

    it('the first and last instants of the range are answered', async () => {
      for (const path of paths) {
        for (const q of [
          `since=${encoded('0001-01-01T17:20:00+17:20')}&until=0001-01-02T00:00:00Z`,
          `since=9999-12-31T00:00:00Z&until=${encoded('9999-12-31T23:59:59.999Z')}`,
        ]) {
          const res = await call('GET', path(q), { token });
          assert.equal(res.status, 200, `${path(q)}: ${res.status} ${res.text}`);
        }
      }
    });

    it("an invocation-list cursor's instant is bounded the same way", async () => {
      const id = 'inv_0190a0a0-0000-7000-8000-000000000000';
      const cursor = (at: unknown) => Buffer.from(JSON.stringify([at, id])).toString('base64url');
      for (const at of [
        '0000-12-31T06:40:53.380Z',
        '+010000-01-01T00:00:00.000Z',
        '-271821-04-20T00:00:00.000Z',
        -8.64e15,
        0,
        null,
      ]) {
        const res = await call('GET', `/v1/invocations?cursor=${cursor(at)}`, { token });
        assert.equal(res.status, 400, `cursor at ${String(at)}: ${res.status} ${res.text}`);
        assert.deepEqual(res.json, { error: 'invalid cursor' });
      }
      const res = await call('GET', `/v1/invocations?cursor=${cursor('0001-01-01T00:00:00.000Z')}`, { token });
      assert.equal(res.status, 200, res.text);
    });
  });
});
