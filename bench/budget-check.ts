// The budget check alone, in this process, against the bench's Redis, for a call that matches a
// hard budget, interleaved call by call so all see the same machine: the rate limiter's take of
// a call's three buckets (the step every call makes), that take followed by the gate's own
// reservation (two round trips: a call whose budget facts its door does not know), and the
// door's one step that does both (gateway/budgets/gate.ts takeAndAdmit: one Lua script). The
// budget bench reports it next to its end-to-end pairs (bench/budget.ts): a busy machine blurs
// the end-to-end difference far more than it blurs this one.
import { randomUUID } from 'node:crypto';
import { createBudgetGate } from '../gateway/budgets/gate.ts';
import { createRedisLedger } from '../gateway/budgets/redis-ledger.ts';
import type { Budget } from '../gateway/budgets/entity.ts';
import { createRedisLimiter } from '../gateway/ratelimit/redis.ts';
import { percentile } from './result.ts';

type Times = { p50: number; p99: number };
export type CheckTimes = { take: Times; takeThenReserve: Times; takeAndReserve: Times; n: number };

export async function measureBudgetCheck(redisUrl: string, iterations: number): Promise<CheckTimes> {
  const prefix = `bench-${randomUUID()}:`;
  const ledger = createRedisLedger(redisUrl, { prefix });
  const limiter = createRedisLimiter(redisUrl, { prefix });
  const budget = {
    id: `bud_${randomUUID()}`,
    tenantId: 't',
    name: 'bench',
    scope: {},
    limitAmount: null,
    limitCalls: Number.MAX_SAFE_INTEGER,
    timeWindow: 'month',
    mode: 'hard',
    alertThresholds: null,
    webhookUrl: null,
    createdBy: 'bench',
    createdAt: new Date(),
    updatedAt: new Date(),
  } as Budget;
  const gate = createBudgetGate({ reads: { of: async () => [budget] }, ledger, owner: 'bench' });
  const buckets = ['agent', 'tenant', 'global'].map((key) => ({ key, rate: 1e9, burst: 1e9 }));
  const call = (id: string) => ({
    tenantId: 't',
    invocationId: id,
    agentId: 'agt',
    user: 'u',
    payer: null,
    amount: 0n,
  });
  const takeMs: number[] = [];
  const twoMs: number[] = [];
  const oneMs: number[] = [];
  try {
    for (let i = 0; i < iterations; i++) {
      let t0 = performance.now();
      await limiter.take(buckets);
      takeMs.push(performance.now() - t0);
      t0 = performance.now();
      await limiter.take(buckets);
      await gate.admit(call(`inv_a${i}`));
      twoMs.push(performance.now() - t0);
      t0 = performance.now();
      await gate.takeAndAdmit(call(`inv_b${i}`), { limiter, buckets });
      oneMs.push(performance.now() - t0);
    }
  } finally {
    await Promise.all([ledger.close(), limiter.close()]);
  }
  const times = (ms: number[]) => ({ p50: percentile(ms, 0.5), p99: percentile(ms, 0.99) });
  return { take: times(takeMs), takeThenReserve: times(twoMs), takeAndReserve: times(oneMs), n: iterations };
}
