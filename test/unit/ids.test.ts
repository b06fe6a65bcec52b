// Ids are UUIDv7 behind a type prefix: lists sort by id as by creation, so ids minted in one
// process must be in order even many to a millisecond, unique, and of the shape isId accepts.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isId, mintedAt, newId, type IdPrefix } from '../../lib/ids.ts';

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

  it('reads the minting time back from an id', () => {
    const before = Date.now();
    const id = newId('cred');
    assert.ok(mintedAt(id) >= before && mintedAt(id) <= Date.now());
    assert.equal(mintedAt('inv_01890a5d-ac96-774b-bcce-b302099a8057'), 0x01890a5dac96);
  });

  it('accepts only its own prefix and the UUIDv7 shape: any other text is no id (property)', () => {
    const prefixes: IdPrefix[] = ['agt', 'cred', 'inv', 'pdec', 'body'];
    const good = 'agt_01890a5d-ac96-774b-bcce-b302099a8057';
    assert.ok(isId('agt', good));
    for (const bad of [
      'agt_01890a5d-ac96-674b-bcce-b302099a8057', // version 6
      'agt_01890a5d-ac96-774b-7cce-b302099a8057', // variant bits not 10
      'agt_01890A5D-AC96-774B-BCCE-B302099A8057', // upper case
      'agt_01890a5dac96774bbcceb302099a8057',
      'agt_01890a5d-ac96-774b-bcce-b302099a8057\n',
      ' agt_01890a5d-ac96-774b-bcce-b302099a8057',
      'agt01890a5d-ac96-774b-bcce-b302099a8057',
      'agt_',
      '',
    ])
      assert.equal(isId('agt', bad), false, bad);
    fc.assert(
      fc.property(fc.constantFrom(...prefixes), fc.constantFrom(...prefixes), fc.string(), (mint, ask, noise) => {
        const id = newId(mint);
        assert.equal(isId(ask, id), mint === ask);
        // Anything added to or taken from a good id makes it no id.
        if (noise.length > 0) {
          assert.equal(isId(mint, id + noise), false);
          assert.equal(isId(mint, noise + id), false);
        }
        assert.equal(isId(mint, id.slice(0, -1)), false);
      }),
      { numRuns: 500 },
    );
  });
});
