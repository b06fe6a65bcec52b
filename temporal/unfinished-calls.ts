// The closed-workflow check: an accepted transactional call whose InvocationWorkflow ended
// without completing its row (terminated from the Web UI or `temporal workflow terminate`,
// failed, timed out, or forgotten by Temporal) would otherwise stay `pending` or `running`
// forever, its payment bound and its request body kept. Every CHECK_EVERY_MS each API process
// leases a batch of started calls unmoved for CHECK_AFTER_MS (gateway/invocations/intents.ts:
// two processes never ask about one row at once), asks Temporal about each workflow, and closes
// the calls whose workflow is closed: failed, with an error class saying why, the request body
// deleted unless the agent captures bodies, and the payment released when the call never
// reached its upstream (gateway/invocations/store.ts, closeUnfinished). The rows the start
// relay owns (intents not yet known started) are left to it; it closes them the same way.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import { leaseUnfinished } from '../gateway/invocations/intents.ts';
import { closeUnfinished } from '../gateway/invocations/store.ts';
import { temporalKnownDown, withCallDeadline } from './client.ts';

const CHECK_EVERY_MS = 10_000;
/**
 * A call unmoved this long is asked about: longer than a live workflow leaves its row alone
 * (the upstream call's whole deadline, UPSTREAM_TIMEOUT_MS, 30 s, and the activity's retries
 * start within seconds), so a zombie attempt of a terminated workflow normally completes
 * its row itself first.
 */
const CHECK_AFTER_MS = 60_000;
/** A call whose workflow still runs (waiting for a worker) is asked about again after this. */
const LEASE_MS = 60_000;
const BATCH = 100;
const DESCRIBE_DEADLINE_MS = 2_000;

/**
 * Why a closed workflow left its call unfinished (the row's error class), or null while it
 * runs: `workflow_terminated` when an operator ended it (terminated or cancelled),
 * `workflow_failed` when it ended on its own (failed, timed out) or Temporal no longer knows it.
 */
export async function closedWorkflowClass(temporal: Client, invocationId: string): Promise<string | null> {
  try {
    const { status } = await withCallDeadline(temporal, DESCRIBE_DEADLINE_MS, () =>
      temporal.workflow.getHandle(invocationId).describe(),
    );
    if (status.name === 'RUNNING') return null;
    return status.name === 'TERMINATED' || status.name === 'CANCELLED' ? 'workflow_terminated' : 'workflow_failed';
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return 'workflow_failed';
    throw err;
  }
}

export type UnfinishedCallCheck = {
  /** One round; returns how many calls it closed. */
  runOnce(): Promise<number>;
  stop(): Promise<void>;
};

export function checkUnfinishedCalls(deps: {
  orm: GatewayDb;
  temporal: Client;
  log: Logger;
  everyMs?: number;
  afterMs?: number;
}): UnfinishedCallCheck {
  const { everyMs = CHECK_EVERY_MS, afterMs = CHECK_AFTER_MS } = deps;
  let stopped = false;

  async function runOnce(): Promise<number> {
    if (temporalKnownDown(deps.temporal)) return 0;
    const due = await leaseUnfinished(deps.orm, { leaseMs: LEASE_MS, afterMs, batch: BATCH });
    let closed = 0;
    // Temporal unreachable mid-batch: the round fails, the rest is asked about once its lease ends.
    for (const id of due) {
      if (stopped) break;
      const errorClass = await closedWorkflowClass(deps.temporal, id);
      if (!errorClass) continue;
      const outcome = await closeUnfinished(deps.orm, id, errorClass);
      if (!outcome) continue;
      closed++;
      deps.log.warn(
        { invocationId: id, errorClass, paymentReleased: outcome.released },
        'closed a call whose workflow ended without completing it',
      );
    }
    return closed;
  }

  const rounds = runRounds(everyMs, runOnce, (err) =>
    deps.log.warn({ err: errorKind(err) }, 'closed-workflow check round failed'),
  );
  return {
    runOnce,
    async stop() {
      stopped = true;
      await rounds.stop();
    },
  };
}
