// Budgets' arithmetic, without a stack (gateway/budgets/): the calendar windows in UTC (hour,
// day, ISO week from Monday, month across a year's end, total from creation) and Retry-After
// until the reset; scope matching as policy matches (every populated field must match, payer
// without regard to case, an empty scope matches all); the in-process ledger's steps (all or
// nothing across budgets, soft never refusing, a true-up and a release, thresholds queued once
// per window); what an invocation row counts; the alert signature a receiver verifies.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { secondsUntilReset, windowAt } from '../../gateway/budgets/windows.ts';
import { scopeMatches } from '../../gateway/budgets/scope.ts';
import { createMemoryLedger } from '../../gateway/budgets/memory-ledger.ts';
import type { Claim } from '../../gateway/budgets/ledger.ts';
import { countedOf } from '../../gateway/budgets/reconcile.ts';
import { signatureOf, verifySignature } from '../../gateway/budgets/alerts.ts';
import { BudgetExceeded, createBudgetGate } from '../../gateway/budgets/gate.ts';
import type { Budget } from '../../gateway/budgets/entity.ts';
import { createMemoryLimiter } from '../../gateway/ratelimit/limiter.ts';

const at = (iso: string) => new Date(iso);
const since = at('2026-01-05T07:08:09.000Z');

describe('budget windows (calendar, UTC)', () => {
  it('puts an instant in its hour, day, ISO week, month, or the total since creation', () => {
    const t = at('2026-12-06T15:26:49.123Z'); // a Sunday
    const iso = (w: Parameters<typeof windowAt>[0]) => {
      const s = windowAt(w, t, since);
      return [s.start.toISOString(), s.resetsAt?.toISOString() ?? null];
    };
    assert.deepEqual(iso('hour'), ['2026-12-06T15:00:00.000Z', '2026-12-06T16:00:00.000Z']);
    assert.deepEqual(iso('day'), ['2026-12-06T00:00:00.000Z', '2026-12-07T00:00:00.000Z']);
    assert.deepEqual(iso('week'), ['2026-11-30T00:00:00.000Z', '2026-12-07T00:00:00.000Z']);
    assert.deepEqual(iso('month'), ['2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z']);
    assert.deepEqual(iso('total'), [since.toISOString(), null]);
  });

  it('starts a week on Monday at 00:00 UTC, a Monday itself included', () => {
    assert.equal(
      windowAt('week', at('2026-11-30T00:00:00.000Z'), since).start.toISOString(),
      '2026-11-30T00:00:00.000Z',
    );
    assert.equal(
      windowAt('week', at('2026-11-29T23:59:59.999Z'), since).start.toISOString(),
      '2026-11-23T00:00:00.000Z',
    );
  });

  it('rolls February of a leap year and December into the next month', () => {
    assert.equal(
      windowAt('month', at('2028-02-29T12:00:00Z'), since).resetsAt!.toISOString(),
      '2028-03-01T00:00:00.000Z',
    );
    assert.equal(
      windowAt('month', at('2026-12-31T23:59:59Z'), since).resetsAt!.toISOString(),
      '2027-01-01T00:00:00.000Z',
    );
  });

  it('always holds the instant: start ≤ t < resets_at, and a window is its start’s window', () => {
    fc.assert(
      fc.property(
        fc.date({ min: at('1990-01-01T00:00:00Z'), max: at('2100-01-01T00:00:00Z'), noInvalidDate: true }),
        fc.constantFrom('hour', 'day', 'week', 'month') as fc.Arbitrary<'hour' | 'day' | 'week' | 'month'>,
        (t, w) => {
          const span = windowAt(w, t, since);
          assert.ok(span.start.getTime() <= t.getTime() && t.getTime() < span.resetsAt!.getTime());
          assert.equal(windowAt(w, span.start, since).start.getTime(), span.start.getTime());
          assert.equal(windowAt(w, span.resetsAt!, since).start.getTime(), span.resetsAt!.getTime());
        },
      ),
    );
  });

  it('answers Retry-After as whole seconds until the reset, at least 1, none for total', () => {
    const span = windowAt('hour', at('2026-12-06T15:59:58.500Z'), since);
    assert.equal(secondsUntilReset(span, at('2026-12-06T15:59:58.500Z')), 2);
    assert.equal(secondsUntilReset(span, at('2026-12-06T15:59:59.999Z')), 1);
    assert.equal(secondsUntilReset(windowAt('total', at('2026-12-06T15:00:00Z'), since), new Date()), null);
  });
});

describe('budget scope', () => {
  const call = { agentId: 'agt_a', user: 'alice', payer: '0xAbCdEf0000000000000000000000000000000001' };
  it('matches every call with an empty scope', () => {
    assert.ok(scopeMatches({}, call));
    assert.ok(scopeMatches({}, { ...call, payer: null }));
  });
  it('needs every populated field to match', () => {
    assert.ok(scopeMatches({ agent_id: 'agt_a', user: 'alice' }, call));
    assert.ok(!scopeMatches({ agent_id: 'agt_a', user: 'bob' }, call));
    assert.ok(!scopeMatches({ agent_id: 'agt_b' }, call));
  });
  it('matches a payer without regard to case, and never a call without one', () => {
    assert.ok(scopeMatches({ payer: '0xabcdef0000000000000000000000000000000001' }, call));
    assert.ok(!scopeMatches({ payer: '0xabcdef0000000000000000000000000000000001' }, { ...call, payer: null }));
  });
});

describe('budget ledger (in process)', () => {
  const claim = (over: Partial<Claim> = {}): Claim => ({
    budgetId: 'bud_a',
    windowStartMs: 1000,
    limitAmount: null,
    limitCalls: 3,
    hard: true,
    thresholds: [],
    keepMs: 60_000,
    ...over,
  });
  const res = (id: string, amount = 0n) => ({ invocationId: id, amount, calls: 1 });

  it('admits up to the limit and then refuses, naming the refusing budget, writing nothing for it', async () => {
    const ledger = createMemoryLedger();
    const calls = claim();
    const other = claim({ budgetId: 'bud_b', limitCalls: 100 });
    for (const id of ['i1', 'i2', 'i3'])
      assert.deepEqual(await ledger.reserve([calls, other], res(id), 'o', 0), { admitted: true });
    assert.deepEqual(await ledger.reserve([calls, other], res('i4'), 'o', 0), { admitted: false, refusing: [0] });
    // The refused call took nothing from the budget that would have admitted it.
    assert.deepEqual(await ledger.usage([calls, other]), [
      { amount: 0n, calls: 3 },
      { amount: 0n, calls: 3 },
    ]);
  });

  it('never refuses for a soft budget, and counts past its limit', async () => {
    const ledger = createMemoryLedger();
    const soft = claim({ hard: false, limitCalls: 1 });
    for (const id of ['i1', 'i2']) assert.deepEqual(await ledger.reserve([soft], res(id), 'o', 0), { admitted: true });
    assert.deepEqual(await ledger.usage([soft]), [{ amount: 0n, calls: 2 }]);
  });

  it('trues a reservation up to the charge, gives a released one back, and settles each once', async () => {
    const ledger = createMemoryLedger();
    const amount = claim({ limitAmount: 1000n, limitCalls: null });
    await ledger.reserve([amount], res('upto', 600n), 'o', 0);
    assert.deepEqual(await ledger.reserve([amount], res('more', 500n), 'o', 0), { admitted: false, refusing: [0] });
    assert.equal(await ledger.settle('upto', { amount: 50n, calls: 1 }), true);
    assert.equal(await ledger.settle('upto', { amount: 50n, calls: 1 }), false);
    assert.deepEqual(await ledger.usage([amount]), [{ amount: 50n, calls: 1 }]);
    await ledger.reserve([amount], res('released', 500n), 'o', 0);
    await ledger.settle('released', { amount: 0n, calls: 0 });
    assert.deepEqual(await ledger.usage([amount]), [{ amount: 50n, calls: 1 }]);
  });

  it('queues each threshold once per window, even when a release makes it cross again', async () => {
    const ledger = createMemoryLedger();
    const alerting = claim({ hard: false, limitCalls: 4, thresholds: [0.5, 1] });
    await ledger.reserve([alerting], res('i1'), 'o', 0);
    await ledger.reserve([alerting], res('i2'), 'o', 0);
    await ledger.settle('i2', { amount: 0n, calls: 0 });
    await ledger.reserve([alerting], res('i3'), 'o', 0);
    for (const id of ['i4', 'i5', 'i6']) await ledger.reserve([alerting], res(id), 'o', 0);
    const queued = await ledger.alerts(10);
    assert.deepEqual(
      queued.map((a) => [a.budgetId, a.windowStartMs, a.threshold]),
      [
        ['bud_a', 1000, 0.5],
        ['bud_a', 1000, 1],
      ],
    );
    // The next window alerts again.
    await ledger.reserve([{ ...alerting, windowStartMs: 2000 }], res('i7'), 'o', 0);
    await ledger.reserve([{ ...alerting, windowStartMs: 2000 }], res('i8'), 'o', 0);
    assert.equal((await ledger.alerts(10)).length, 3);
  });

  it('hands due reservations to one reconciler at a time', async () => {
    const ledger = createMemoryLedger();
    await ledger.reserve([claim()], res('i1'), 'owner-1', 100);
    assert.deepEqual(await ledger.due(50, 1000, 10), []);
    assert.deepEqual(
      (await ledger.due(100, 1000, 10)).map((d) => [d.invocationId, d.owner]),
      [['i1', 'owner-1']],
    );
    assert.deepEqual(await ledger.due(500, 2000, 10), []);
  });
});

describe('what an invocation row counts', () => {
  const row = (over: Record<string, unknown>) =>
    ({
      id: 'inv',
      status: 'succeeded',
      attempts: 1,
      error_class: null,
      payment_amount: null,
      payment_scheme: null,
      payment_charge: null,
      payment_settlement: null,
      ...over,
    }) as Parameters<typeof countedOf>[0];
  it('is not known while the call runs or its metered charge settles', () => {
    assert.equal(countedOf(row({ status: 'running' })), null);
    assert.equal(countedOf(row({ payment_scheme: 'upto', payment_charge: '5' })), null);
    assert.equal(countedOf(row({ payment_scheme: 'upto', payment_charge: '5', payment_settlement: 'settling' })), null);
  });
  it('is nothing for a call never forwarded (its payment released)', () => {
    assert.deepEqual(countedOf(row({ status: 'failed', attempts: 0, payment_amount: '100' })), {
      amount: 0n,
      calls: 0,
    });
  });
  it('is no call for one whose failure says nothing was sent, but what it was charged', () => {
    for (const error_class of ['blocked', 'circuit_open', 'credential'])
      assert.deepEqual(countedOf(row({ status: 'failed', error_class })), { amount: 0n, calls: 0 });
    assert.deepEqual(countedOf(row({ status: 'failed', error_class: 'circuit_open', payment_amount: '7' })), {
      amount: 7n,
      calls: 0,
    });
    assert.deepEqual(countedOf(row({ status: 'failed', error_class: 'upstream_5xx' })), { amount: 0n, calls: 1 });
  });
  it('is the price of an exact call, the settled charge of a metered one, one call each', () => {
    assert.deepEqual(countedOf(row({ payment_amount: '100' })), { amount: 100n, calls: 1 });
    assert.deepEqual(
      countedOf(
        row({ payment_scheme: 'upto', payment_amount: '1000', payment_charge: '50', payment_settlement: 'settled' }),
      ),
      { amount: 50n, calls: 1 },
    );
    assert.deepEqual(countedOf(row({ payment_scheme: 'upto', payment_charge: '50', payment_settlement: 'failed' })), {
      amount: 0n,
      calls: 1,
    });
    assert.deepEqual(countedOf(row({ status: 'failed' })), { amount: 0n, calls: 1 });
  });
});

describe('budget alert signature', () => {
  const secret = 'whsec_test';
  const body = '{"type":"budget.threshold_crossed"}';
  it('verifies what it signed, within the tolerance', () => {
    const header = signatureOf(secret, body, 1_000_000);
    assert.match(header, /^t=1000000,v1=[0-9a-f]{64}$/);
    assert.ok(verifySignature(secret, body, header, 1_000_100));
  });
  it('refuses another body, another secret, or a replay past the tolerance', () => {
    const header = signatureOf(secret, body, 1_000_000);
    assert.ok(!verifySignature(secret, `${body} `, header, 1_000_000));
    assert.ok(!verifySignature('whsec_other', body, header, 1_000_000));
    assert.ok(!verifySignature(secret, body, header, 1_000_301));
    assert.ok(!verifySignature(secret, body, 't=abc,v1=00', 1_000_000));
  });
});

describe('budget gate (in-process ledger)', () => {
  const budget = (id: string, over: Partial<Budget>): Budget =>
    ({
      id,
      tenantId: 't',
      name: id,
      scope: {},
      limitAmount: null,
      limitCalls: 1,
      timeWindow: 'day',
      mode: 'hard',
      alertThresholds: null,
      webhookUrl: null,
      createdBy: 'u',
      createdAt: new Date('2026-01-01T00:00:00Z'),
      updatedAt: new Date('2026-01-01T00:00:00Z'),
      ...over,
    }) as Budget;
  const gateOver = (budgets: Budget[], ledger = createMemoryLedger()) =>
    createBudgetGate({ reads: { of: async () => budgets }, ledger, owner: 'o' });
  const call = (id: string, over: Record<string, unknown> = {}) => ({
    tenantId: 't',
    invocationId: id,
    agentId: 'agt_a',
    user: 'alice',
    payer: null,
    amount: 0n,
    ...over,
  });

  it('checks every matching budget and names the strictest refusing one: the window that resets last', async () => {
    const ledger = createMemoryLedger();
    const other = budget('bud_other_agent', { scope: { agent_id: 'agt_b' }, limitCalls: 1 });
    const gate = gateOver(
      [
        budget('bud_hour', { timeWindow: 'hour' }),
        budget('bud_month', { timeWindow: 'month' }),
        budget('bud_day', { timeWindow: 'day' }),
        other,
      ],
      ledger,
    );
    assert.ok(await gate.admit(call('i1')));
    const refused = await gate.admit(call('i2')).then(
      () => assert.fail('admitted past three full budgets'),
      (err: unknown) => err,
    );
    assert.ok(refused instanceof BudgetExceeded);
    assert.equal(refused.budgetId, 'bud_month');
    assert.ok(refused.retryAfterSeconds! > 3600 && refused.retryAfterSeconds! <= 31 * 86_400);
    // The budget scoped to another agent counted neither call.
    const start = windowAt('day', new Date(), other.createdAt).start.getTime();
    assert.deepEqual(await ledger.usage([{ budgetId: other.id, windowStartMs: start }]), [{ amount: 0n, calls: 0 }]);
  });

  it('refuses a call whose amount alone is past a hard limit, names a total budget without Retry-After', async () => {
    const gate = gateOver([budget('bud_total', { timeWindow: 'total', limitCalls: null, limitAmount: '100' })]);
    const refused = await gate.admit(call('i1', { amount: 101n })).catch((err: unknown) => err);
    assert.ok(refused instanceof BudgetExceeded);
    assert.deepEqual([refused.budgetId, refused.retryAfterSeconds], ['bud_total', null]);
    assert.ok(await gate.admit(call('i2', { amount: 100n })));
  });

  it('gives a released reservation back, once', async () => {
    const gate = gateOver([budget('bud_one', {})]);
    const hold = await gate.admit(call('i1'));
    await hold!.release();
    await hold!.release();
    const again = await gate.admit(call('i2'));
    assert.ok(again);
    await assert.rejects(gate.admit(call('i3')), BudgetExceeded);
  });

  it('passes a call no budget matches without a reservation', async () => {
    const gate = gateOver([budget('bud_bob', { scope: { user: 'bob' } })]);
    assert.equal(await gate.admit(call('i1')), null);
  });

  describe("the door's step: the rate-limit take and the reservation together", () => {
    const bucket = { key: 'agent:a', rate: 0.001, burst: 2 };
    const setup = (budgets: Budget[]) => {
      const ledger = createMemoryLedger();
      const limiter = createMemoryLimiter();
      return { ledger, limiter, gate: gateOver(budgets, ledger), take: { limiter, buckets: [bucket] } };
    };
    const usedOf = async (ledger: ReturnType<typeof createMemoryLedger>, b: Budget) =>
      (
        await ledger.usage([
          { budgetId: b.id, windowStartMs: windowAt(b.timeWindow, new Date(), b.createdAt).start.getTime() },
        ])
      )[0];

    it('reserves a call the limiter allows, and refuses past the budget with the tokens taken', async () => {
      const one = budget('bud_one', { limitCalls: 1 });
      const { ledger, gate, take, limiter } = setup([one]);
      const first = await gate.takeAndAdmit(call('i1'), take);
      assert.equal(first.decision.allowed, true);
      assert.ok(first.budget && 'hold' in first.budget && first.budget.hold);
      assert.deepEqual(await usedOf(ledger, one), { amount: 0n, calls: 1 });
      const second = await gate.takeAndAdmit(call('i2'), take);
      assert.equal(second.decision.allowed, true, 'the rate limit allows it: the budget refuses it at its stage');
      assert.ok(second.budget && 'refused' in second.budget && second.budget.refused instanceof BudgetExceeded);
      assert.equal((second.budget.refused as BudgetExceeded).budgetId, 'bud_one');
      assert.deepEqual(await usedOf(ledger, one), { amount: 0n, calls: 1 }, 'the refused call reserved nothing');
      // Both took their token, as a call refused at the budget stage always did: the bucket (burst 2) is empty.
      assert.equal((await limiter.take([bucket])).allowed, false);
    });

    it('reserves nothing for a call the limiter refuses', async () => {
      const wide = budget('bud_wide', { limitCalls: 100 });
      const { ledger, gate, take } = setup([wide]);
      for (let i = 0; i < 2; i++) assert.equal((await gate.takeAndAdmit(call(`i${i}`), take)).decision.allowed, true);
      const refused = await gate.takeAndAdmit(call('i3'), take);
      assert.equal(refused.decision.allowed, false);
      assert.deepEqual(refused.budget, { hold: null });
      assert.deepEqual(await usedOf(ledger, wide), { amount: 0n, calls: 2 });
    });

    it('only takes the tokens of a call no budget matches', async () => {
      const { gate, take } = setup([budget('bud_bob', { scope: { user: 'bob' } })]);
      const { decision, budget: verdict } = await gate.takeAndAdmit(call('i1'), take);
      assert.equal(decision.allowed, true);
      assert.deepEqual(verdict, { hold: null });
    });

    it('leaves a call undecided when a budget of its tenant names a payer (the budget stage reserves it)', async () => {
      const payers = budget('bud_payer', { scope: { payer: '0xabc' } });
      const { ledger, gate, take } = setup([payers, budget('bud_all', { limitCalls: 5 })]);
      const { decision, budget: verdict } = await gate.takeAndAdmit(call('i1'), take);
      assert.equal(decision.allowed, true);
      assert.equal(verdict, null);
      assert.deepEqual(await usedOf(ledger, budget('bud_all', {})), { amount: 0n, calls: 0 });
    });

    it('gives the reservation back when the call is refused after the door', async () => {
      const one = budget('bud_one', { limitCalls: 1 });
      const { ledger, gate, take } = setup([one]);
      const first = await gate.takeAndAdmit(call('i1'), take);
      assert.ok(first.budget && 'hold' in first.budget);
      await first.budget.hold!.release();
      assert.deepEqual(await usedOf(ledger, one), { amount: 0n, calls: 0 });
      assert.ok(await gate.admit(call('i2')));
    });
  });
});
