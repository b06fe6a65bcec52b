// Request-shape rules of the management API that need no database: list paging
// (api/pagination.ts: limit clamped to 1..100, an opaque cursor that must decode to an id of
// the listed kind, each given once) and the nesting bound applied before anything walks a
// parsed body (lib/json-depth.ts).
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { z } from 'zod';
import { PageQuery, pageOf } from '../../api/pagination.ts';
import { parseQuery } from '../../api/validation.ts';
import type { IdPrefix } from '../../lib/ids.ts';
import { MAX_BODY_DEPTH, nestsDeeperThan } from '../../lib/json-depth.ts';
import { ApiError } from '../../lib/http-error.ts';
import { newId } from '../../lib/ids.ts';

const cursorOf = (id: string) => Buffer.from(id, 'utf8').toString('base64url');
/** A list's query as its route reads it: parsed by the list's schema, then made a page. */
const parsePage = (query: Record<string, string | string[]>, prefix: IdPrefix) =>
  pageOf(parseQuery(z.object(PageQuery), query), prefix);

function badRequest(fn: () => unknown, message: string) {
  assert.throws(fn, (err: unknown) => err instanceof ApiError && err.status === 400 && err.message === message);
}

describe('list paging', () => {
  it('defaults to 20, clamps the limit to 1..100 and reads the cursor back to the id it encodes', () => {
    assert.deepEqual(parsePage({}, 'agt'), { limit: 20, after: undefined });
    for (const [given, limit] of [
      ['1', 1],
      ['100', 100],
      ['101', 100],
      ['0', 1],
      ['-5', 1],
      ['999999999', 100],
    ] as const)
      assert.equal(parsePage({ limit: given }, 'agt').limit, limit, given);
    const id = newId('agt');
    assert.equal(parsePage({ cursor: cursorOf(id) }, 'agt').after, id);
  });

  it('answers 400 for a limit that is no integer, a cursor that is no id of the list, and either given twice', () => {
    for (const limit of ['', 'ten', '1.5', '1e3', '0x10', '12345678901234567', ' 5'])
      badRequest(() => parsePage({ limit }, 'agt'), 'limit must be an integer');
    for (const cursor of ['', 'nope', cursorOf(newId('inv')), cursorOf('agt_x')])
      badRequest(() => parsePage({ cursor }, 'agt'), 'invalid cursor');
    badRequest(() => parsePage({ limit: ['1', '2'] }, 'agt'), 'limit may be given once');
    badRequest(() => parsePage({ cursor: ['a', 'b'] }, 'agt'), 'cursor may be given once');
  });

  it('takes any text as a cursor without throwing anything but a 400 (property)', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 120 }), (cursor) => {
        try {
          const page = parsePage({ cursor }, 'cred');
          assert.match(page.after!, /^cred_/);
        } catch (err) {
          assert.ok(err instanceof ApiError && err.status === 400);
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('nesting bound of parsed bodies', () => {
  const nested = (depth: number, leaf: unknown = 1, asArray = false): unknown => {
    let value = leaf;
    for (let i = 0; i < depth; i++) value = asArray ? [value] : { k: value };
    return value;
  };

  it('counts objects and arrays, not scalars, and refuses one level past the bound', () => {
    for (const scalar of [null, 1, 'text', true]) assert.equal(nestsDeeperThan(scalar, 0), false);
    assert.equal(nestsDeeperThan({}, 0), true);
    assert.equal(nestsDeeperThan({}, 1), false);
    assert.equal(nestsDeeperThan(nested(MAX_BODY_DEPTH), MAX_BODY_DEPTH), false);
    assert.equal(nestsDeeperThan(nested(MAX_BODY_DEPTH + 1), MAX_BODY_DEPTH), true);
    assert.equal(nestsDeeperThan(nested(MAX_BODY_DEPTH + 1, 1, true), MAX_BODY_DEPTH), true);
    // The deepest branch counts, wherever it is.
    assert.equal(nestsDeeperThan({ a: 1, b: [2, { c: nested(2) }] }, 5), false);
    assert.equal(nestsDeeperThan({ a: 1, b: [2, { c: nested(3) }] }, 5), true);
  });

  it('measures a body nested 100 000 levels deep without overflowing the stack', () => {
    assert.equal(nestsDeeperThan(JSON.parse('['.repeat(100_000) + ']'.repeat(100_000)), MAX_BODY_DEPTH), true);
  });

  it('agrees with a recursive measure on any JSON value (property)', () => {
    const depthOf = (value: unknown): number =>
      value === null || typeof value !== 'object'
        ? 0
        : 1 + Math.max(0, ...(Array.isArray(value) ? value : Object.values(value)).map(depthOf));
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.nat({ max: 10 }), (value, max) => {
        assert.equal(nestsDeeperThan(value, max), depthOf(value) > max);
      }),
      { numRuns: 1000 },
    );
  });
});
