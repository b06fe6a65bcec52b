// The budget check alone, in this process, against the bench's Redis: the admission gate's whole
// step for a call that matches a hard budget (the tenant's budgets from memory, the claim built,
// the reservation's one Lua script: gateway/budgets/gate.ts) beside the rate limiter's take of a
// call's three buckets (the step every call already makes), interleaved call by call so both see
// the same machine. The proxy bench reports it next to its end-to-end pair (bench/proxy.ts): a
// busy machine blurs the end-to-end difference far more than it blurs this one.
import { randomUUID } from 'node:crypto';
import { createBudgetGate } from '../gateway/budgets/gate.ts';
import { createRedisLedger } from '../gateway/budgets/redis-ledger.ts';
import type { Budget } from '../gateway/budgets/entity.ts';
import { createRedisLimiter } from '../gateway/ratelimit/redis.ts';
import { percentile } from './result.ts';

export type CheckTimes = { gateP50: number; takeP50: number; gateP99: number; takeP99: number; n: number };

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
  const gateMs: number[] = [];
  const takeMs: number[] = [];
  try {
    for (let i = 0; i < iterations; i++) {
      let t0 = performance.now();
      await limiter.take(buckets);
      takeMs.push(performance.now() - t0);
      t0 = performance.now();
      await gate.admit({ tenantId: 't', invocationId: `inv_${i}`, agentId: 'agt', user: 'u', payer: null, amount: 0n });
      gateMs.push(performance.now() - t0);
    }
  } finally {
    await Promise.all([ledger.close(), limiter.close()]);
  }
  return {
    gateP50: percentile(gateMs, 0.5),
    gateP99: percentile(gateMs, 0.99),
    takeP50: percentile(takeMs, 0.5),
    takeP99: percentile(takeMs, 0.99),
    n: iterations,
  };
}
