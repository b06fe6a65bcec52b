// Ids are UUIDv7 behind a type prefix: lists sort by id as by creation, so ids minted in one
// process must be in order even many to a millisecond, unique, and of the shape isId accepts.
import assert from 'node:assert/strict';
import { isId, newId } from '../../lib/ids.ts';

describe('ids', () => {
  it('mints unique, well-formed ids in the order they were minted, many per millisecond', () => {
    const ids = Array.from({ length: 20_000 }, () => newId('inv'));
    assert.equal(new Set(ids).size, ids.length);
    assert.ok(ids.every((id) => isId('inv', id)));
    const sorted = [...ids].sort();
    assert.deepEqual(ids, sorted);
    // More ids than one 4 KiB pool of randomness holds (256): the random tails still differ.
    const tails = new Set(ids.map((id) => id.slice(-12)));
    assert.equal(tails.size, ids.length);
  });

  it('puts the minting time in the id', () => {
    const before = Date.now();
    const id = newId('agt');
    const ms = parseInt(id.slice(4, 12) + id.slice(13, 17), 16);
    assert.ok(ms >= before && ms <= Date.now() + 1, `${ms} not within [${before}, now]`);
    assert.ok(!isId('inv', id));
  });
});
