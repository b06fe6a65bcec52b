// The budget rounds every API process runs beside its calls (gateway/budgets/): its liveness
// (its reservations are its own while it lives), the reconciliation of due reservations from
// the invocation rows (gateway/budgets/reconcile.ts: any process trues up any call's, so a dead
// one's are not stranded), and the start of queued alerts, one BudgetAlertWorkflow per
// threshold and window (workflow id `budget-alert-<budget>-<window start ms>-<threshold>`,
// REJECT_DUPLICATE: a second start of the same alert, from another replica or after a crash
// between the start and the queue's removal, changes nothing), carrying its budget's tenant as
// the TenantId search attribute like every tenant's workflow. An alert leaves the queue only
// once its workflow exists (or its budget is gone: nothing to send), so a Temporal outage
// delays it and loses nothing.
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { BudgetLedger } from '../gateway/budgets/ledger.ts';
import { BATCH_FULL, reconcileOnce, type ReconcileSettings } from '../gateway/budgets/reconcile.ts';
import { alertIdOf, type AlertFacts } from '../gateway/budgets/alerts.ts';
import { withCallDeadline } from './client.ts';
import { TenantId } from './search-attributes.ts';

/** The owner key outlives a missed beat or two; a dead process's reservations wait this long at most. */
const OWNER_TTL_MS = 6_000;
const HEARTBEAT_MS = 2_000;
const START_DEADLINE_MS = 5_000;
const MAX_BATCHES_PER_ROUND = 10;

export type BudgetRoundDeps = {
  ledger: BudgetLedger;
  query: (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;
  temporal: Client;
  taskQueue: string;
  owner: string;
  settings: ReconcileSettings;
  log: Logger;
};

const TENANT_OF_BUDGET = 'select tenant_id from budgets where id = ?';

async function startAlert(deps: BudgetRoundDeps, alert: AlertFacts): Promise<void> {
  const [budget] = await deps.query(TENANT_OF_BUDGET, [alert.budgetId]);
  // Deleted since the threshold was crossed: there is nothing to send, nor a tenant to file it under.
  if (!budget) return;
  const input: AlertFacts = {
    budgetId: alert.budgetId,
    windowStartMs: alert.windowStartMs,
    threshold: alert.threshold,
  };
  try {
    await withCallDeadline(deps.temporal, START_DEADLINE_MS, () =>
      deps.temporal.workflow.start('BudgetAlertWorkflow', {
        taskQueue: deps.taskQueue,
        workflowId: `budget-${alertIdOf(input)}`,
        args: [input],
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        typedSearchAttributes: [{ key: TenantId, value: String(budget.tenant_id) }],
        staticSummary: `budget ${alert.budgetId}: ${alert.threshold * 100}% of its window from ${new Date(alert.windowStartMs).toISOString()}`,
      }),
    );
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
}

/** Starts the rounds; `stop` ends them. Their timers never hold the process open. */
export function runBudgetRounds(deps: BudgetRoundDeps): { stop(): Promise<void> } {
  const { ledger, log } = deps;
  const beat = async () => {
    await ledger
      .heartbeat(deps.owner, OWNER_TTL_MS)
      .catch((err) => log.warn({ err: errorKind(err) }, 'budget heartbeat failed'));
  };
  const round = async () => {
    try {
      // A full batch may leave more due: taken at once, a few batches a round, so a busy
      // process's reservations are trued up as fast as its calls come.
      for (let batch = 0; batch < MAX_BATCHES_PER_ROUND; batch++)
        if ((await reconcileOnce({ ledger, query: deps.query, settings: deps.settings })) < BATCH_FULL) break;
      for (const alert of await ledger.alerts(50)) {
        await startAlert(deps, alert);
        await ledger.delivered(alert);
      }
    } catch (err) {
      log.warn({ err: errorKind(err) }, 'budget round failed; retried next round');
    }
  };
  void beat();
  const onError = (err: unknown) => log.warn({ err: errorKind(err) }, 'budget round failed; retried next round');
  // Neither overlaps itself: a round slower than the period (Temporal away) delays the next.
  const heart = runRounds(HEARTBEAT_MS, beat, onError);
  const rounds = runRounds(deps.settings.everyMs, round, onError);
  return {
    async stop() {
      await Promise.all([heart.stop(), rounds.stop()]);
    },
  };
}
