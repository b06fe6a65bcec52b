// The budget parts of an API process: the tenants' budgets (cached, gateway/budgets/reads.ts),
// the recorder of refused calls (gateway/budgets/refusals.ts), their ledger (Redis with REDIS_URL, shared by every replica; else this process's memory), the
// admission gate, and this process's budget rounds (temporal/budget-rounds.ts: liveness,
// reconciliation, alert starts), which run as long as the process does.
import { randomUUID } from 'node:crypto';
import { createBudgetReads, type BudgetReads } from '../../gateway/budgets/reads.ts';
import { createBudgetGate, type BudgetGate } from '../../gateway/budgets/gate.ts';
import type { BudgetLedger } from '../../gateway/budgets/ledger.ts';
import { createRedisLedger } from '../../gateway/budgets/redis-ledger.ts';
import { createMemoryLedger } from '../../gateway/budgets/memory-ledger.ts';
import { queryRows } from '../../gateway/db/orm.ts';
import { createRefusalRecorder, type RefusalRecorder } from '../../gateway/budgets/refusals.ts';
import { errorKind } from '../../lib/error-kind.ts';
import { runBudgetRounds } from '../../temporal/budget-rounds.ts';
import type { AppDeps } from '../deps.ts';

export type BudgetParts = {
  reads: BudgetReads;
  ledger: BudgetLedger;
  gate: BudgetGate;
  /** Records each refused call as an invocation naming its budget. */
  refusals: RefusalRecorder;
  stop(): Promise<void>;
};

export function createBudgetParts(deps: AppDeps): BudgetParts {
  const onError = (err: Error) => deps.log.warn({ err: errorKind(err) }, 'budget ledger unavailable');
  const ledger = deps.config.redisUrl ? createRedisLedger(deps.config.redisUrl, { onError }) : createMemoryLedger();
  const reads = createBudgetReads(deps.orm, deps.feed);
  const owner = `api-${randomUUID()}`;
  const rounds = runBudgetRounds({
    ledger,
    query: queryRows(deps.orm),
    temporal: deps.temporal,
    taskQueue: deps.config.temporal.taskQueue,
    owner,
    settings: deps.config.budgets,
    log: deps.log,
  });
  return {
    reads,
    ledger,
    gate: createBudgetGate({ reads, ledger, owner, onError }),
    refusals: createRefusalRecorder(deps.orm, (err) =>
      deps.log.warn({ err: errorKind(err) }, 'a budget refusal could not be recorded'),
    ),
    async stop() {
      await rounds.stop();
      await ledger.close();
    },
  };
}
