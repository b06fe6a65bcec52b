// A claim batch the facilitator fails is claimed in parts (gateway/payment/channel-claims/split.ts):
// the row it will not claim ends alone and is set aside, every other row is claimed once, in few
// transactions, and the requests stay within ceil(log2 N) + 2 per refused row and the cap. The
// facilitator here is a FAKE (it fails any claim holding a row it was told to refuse, and claims
// the rest): the real one refusing a row of a real batch is test/settlement/channel-claims.test.ts's.
import assert from 'node:assert/strict';
import { MAX_CLAIM_REQUESTS, claimInParts, type PartAnswer } from '../../gateway/payment/channel-claims/split.ts';

const rows = (n: number) => Array.from({ length: n }, (_, i) => `c${i}`);

/**
 * A FAKE facilitator: fails (`settlement_failed`) every claim holding a row of `refusing`, claims
 * the others in a transaction each; `answers` overrides the answer to the request of that number
 * (1: the first). It counts how often each row was claimed and keeps every part it was sent.
 */
function fakeFacilitator(refusing: Iterable<string>, answers: Record<number, PartAnswer> = {}) {
  const refused = new Set(refusing);
  const claims = new Map<string, number>();
  const parts: string[][] = [];
  const send = async (part: string[]): Promise<PartAnswer> => {
    parts.push(part);
    const override = answers[parts.length];
    if (override) return override;
    if (part.some((r) => refused.has(r))) return { ok: false, error: 'settlement_failed' };
    for (const r of part) claims.set(r, (claims.get(r) ?? 0) + 1);
    return { ok: true, transaction: `0x${String(parts.length).padStart(64, '0')}` };
  };
  return { send, claims, parts };
}

/** Every row of `batch` is in exactly one of the outcome's lists. */
function accountedOnce(batch: string[], outcome: Awaited<ReturnType<typeof claimInParts<string>>>) {
  const all = [...outcome.claimed.flatMap((p) => p.rows), ...outcome.setAside, ...outcome.left];
  assert.deepEqual([...all].sort(), [...batch].sort());
}

describe('channel claims: a refused batch claimed in parts', () => {
  it('a batch the facilitator claims is one request, one transaction', async () => {
    const facilitator = fakeFacilitator([]);
    const outcome = await claimInParts(rows(5), facilitator.send);
    assert.equal(outcome.requests, 1);
    assert.deepEqual(
      outcome.claimed.map((p) => p.rows),
      [rows(5)],
    );
    assert.deepEqual([outcome.setAside, outcome.left, outcome.stopped], [[], [], null]);
  });

  it('one refused row of 8: halves sent, the refused row ends alone and is set aside, the rest claimed once in 3 transactions', async () => {
    const facilitator = fakeFacilitator(['c5']);
    const outcome = await claimInParts(rows(8), facilitator.send);
    // The whole batch; its first half (claimed), so the refusal is in the second half: its first
    // half (refused, its second half kept aside); c4 (claimed), so c5 is sent alone (refused: set
    // aside); then what was kept aside, in one claim.
    assert.deepEqual(facilitator.parts, [
      rows(8),
      ['c0', 'c1', 'c2', 'c3'],
      ['c4', 'c5'],
      ['c4'],
      ['c5'],
      ['c6', 'c7'],
    ]);
    assert.deepEqual(outcome.setAside, ['c5']);
    assert.deepEqual(outcome.left, []);
    assert.equal(outcome.requests, 6);
    assert.equal(outcome.claimed.length, 3, 'three claim transactions');
    assert.deepEqual(new Set(outcome.claimed.map((p) => p.transaction)).size, 3);
    for (const r of rows(8).filter((r) => r !== 'c5')) assert.equal(facilitator.claims.get(r), 1, r);
    assert.equal(facilitator.claims.get('c5'), undefined);
  });

  it('one refused row anywhere in a batch of 1 to 100: the others claimed once, it set aside, within ceil(log2 N) + 2 requests beyond the first', async () => {
    for (let n = 1; n <= 100; n++) {
      const batch = rows(n);
      const bound = 1 + Math.ceil(Math.log2(n)) + 2;
      for (let bad = 0; bad < n; bad++) {
        const facilitator = fakeFacilitator([`c${bad}`]);
        const outcome = await claimInParts(batch, facilitator.send);
        const at = `N=${n}, refused row ${bad}`;
        assert.deepEqual(outcome.setAside, [`c${bad}`], at);
        assert.deepEqual([outcome.left, outcome.stopped], [[], null], at);
        assert.ok(outcome.requests <= bound, `${at}: ${outcome.requests} requests, bound ${bound}`);
        assert.ok(
          outcome.claimed.length <= Math.ceil(Math.log2(n)) + 1,
          `${at}: ${outcome.claimed.length} transactions`,
        );
        for (const r of batch) assert.equal(facilitator.claims.get(r), r === `c${bad}` ? undefined : 1, at);
        accountedOnce(batch, outcome);
      }
    }
  });

  it('two refused rows of 100: both set aside, the 98 others claimed once, within the cap', async () => {
    const batch = rows(100);
    for (const pair of [
      [0, 1],
      [0, 99],
      [31, 32],
      [49, 50],
      [70, 97],
    ]) {
      const refused = pair.map((i) => `c${i}`);
      const facilitator = fakeFacilitator(refused);
      const outcome = await claimInParts(batch, facilitator.send);
      assert.deepEqual([...outcome.setAside].sort(), [...refused].sort(), String(pair));
      assert.deepEqual(outcome.left, [], String(pair));
      assert.ok(outcome.requests <= 1 + 2 * (Math.ceil(Math.log2(100)) + 2), `${pair}: ${outcome.requests}`);
      assert.ok(outcome.requests <= MAX_CLAIM_REQUESTS);
      for (const r of batch) assert.equal(facilitator.claims.get(r), refused.includes(r) ? undefined : 1);
    }
  });

  it('more refused rows than one call isolates: it stops at the cap, and the next rounds, sent only what is left, finish', async () => {
    const batch = rows(100);
    const refused = new Set(Array.from({ length: 10 }, (_, i) => `c${i * 10 + 3}`));
    const facilitator = fakeFacilitator(refused);
    let left = batch;
    const setAside: string[] = [];
    let rounds = 0;
    while (left.length) {
      rounds++;
      const outcome = await claimInParts(left, facilitator.send);
      assert.ok(outcome.requests <= MAX_CLAIM_REQUESTS);
      accountedOnce(left, outcome);
      if (rounds === 1) {
        assert.equal(outcome.requests, MAX_CLAIM_REQUESTS);
        assert.equal(outcome.stopped, 'limit');
        assert.ok(outcome.left.length > 0);
      }
      for (const r of outcome.setAside) assert.ok(refused.has(r), `${r} set aside, but it was never refused`);
      setAside.push(...outcome.setAside);
      // The caller records what was claimed and set aside: the next round plans only the rest.
      left = outcome.left;
      assert.ok(rounds <= 10, 'progress each round');
    }
    assert.deepEqual(new Set(setAside), refused);
    for (const r of batch) assert.equal(facilitator.claims.get(r), refused.has(r) ? undefined : 1, r);
  });

  it('a failure no part repeats sets nothing aside: every row is claimed', async () => {
    const facilitator = fakeFacilitator([], { 1: { ok: false, error: 'settlement_failed' } });
    const outcome = await claimInParts(rows(10), facilitator.send);
    assert.deepEqual(outcome.setAside, []);
    assert.deepEqual(outcome.left, []);
    for (const r of rows(10)) assert.equal(facilitator.claims.get(r), 1);
  });

  it('the account refused (settlement_refused): no part is sent, every row is left for the next round', async () => {
    const facilitator = fakeFacilitator([], { 1: { ok: false, error: 'settlement_refused' } });
    const outcome = await claimInParts(rows(6), facilitator.send);
    assert.deepEqual(
      [outcome.requests, outcome.stopped, outcome.setAside, outcome.left],
      [1, 'settlement_refused', [], rows(6)],
    );
    // Alone too: a refusal of the account is no reason to set a channel aside.
    const alone = await claimInParts(
      ['c0'],
      fakeFacilitator([], { 1: { ok: false, error: 'settlement_refused' } }).send,
    );
    assert.deepEqual([alone.setAside, alone.left], [[], ['c0']]);
  });

  it('an answer not known mid-split stops it: the parts claimed are kept, the rest is left to be asked again', async () => {
    const facilitator = fakeFacilitator(['c7'], { 4: { ok: false, error: 'settlement_unavailable' } });
    const outcome = await claimInParts(rows(8), facilitator.send);
    // 1: all (refused); 2: c0..c3 (claimed); 3: c4..c5 (claimed); 4: c6 (not known).
    assert.equal(outcome.stopped, 'settlement_unavailable');
    assert.deepEqual(
      outcome.claimed.map((p) => p.rows),
      [
        ['c0', 'c1', 'c2', 'c3'],
        ['c4', 'c5'],
      ],
    );
    assert.deepEqual(outcome.setAside, []);
    assert.deepEqual([...outcome.left].sort(), ['c6', 'c7']);
  });

  it('past the caller’s deadline no part is sent: the batch is left whole', async () => {
    const facilitator = fakeFacilitator(['c2']);
    const outcome = await claimInParts(rows(4), facilitator.send, { mayContinue: () => false });
    assert.deepEqual([outcome.requests, outcome.stopped, outcome.left], [1, 'limit', rows(4)]);
  });
});
