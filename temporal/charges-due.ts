// The due-charges round: a metered call whose charge is still due a while after it completed
// gets its MeteredChargeWorkflow started (charge-start.ts). A streamed call's process starts it
// as its stream ends, so this round catches what a process left: it died between the row's
// completion and the start, Temporal was unreachable then, or the lost-stream sweep closed the
// row (gateway/invocations/stale-streams.ts). A transactional call settles in its own workflow;
// one still due long after whose workflow is closed (terminated before the step) is started here. Every CHECK_EVERY_MS
// each API process leases a batch (two processes never start the same charge at once; the
// workflow id makes a second start harmless anyway), at most PER_TENANT of one tenant's, so a
// tenant's backlog of charges takes that many places of each round and leaves the rest to others.
import type { Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import { leaseDueCharges } from '../gateway/payment/charges-due.ts';
import { temporalKnownDown } from './client.ts';
import { startMeteredCharge } from './charge-start.ts';
import { closedWorkflowClass } from './unfinished-calls.ts';

const CHECK_EVERY_MS = 10_000;
/** A streamed call's process starts its charge within a second of its completion. */
const STREAMED_AFTER_MS = 15_000;
/** A row the lost-stream sweep closed: its process, if alive after all, completes it meanwhile. */
const LOST_AFTER_MS = 2 * 60_000;
/**
 * A transactional call's workflow settles its charge itself; one still due this long after its
 * completion is started here only once its InvocationWorkflow is closed (terminated before the step).
 */
const TRANSACTIONAL_AFTER_MS = 10 * 60_000;
/** A leased charge is not started again before this. */
const LEASE_MS = 5 * 60_000;
const BATCH = 100;
/** The most charges of one tenant a round starts: a tenant with a backlog leaves room for the others'. */
const PER_TENANT = 10;
const START_DEADLINE_MS = 2_000;

export function startDueCharges(deps: {
  orm: GatewayDb;
  temporal: Client;
  taskQueue: string;
  log: Logger;
  everyMs?: number;
  streamedAfterMs?: number;
  lostAfterMs?: number;
}): { runOnce(): Promise<number>; stop(): Promise<void> } {
  const { everyMs = CHECK_EVERY_MS, streamedAfterMs = STREAMED_AFTER_MS, lostAfterMs = LOST_AFTER_MS } = deps;
  let stopped = false;

  async function runOnce(): Promise<number> {
    if (temporalKnownDown(deps.temporal)) return 0;
    const due = await leaseDueCharges(deps.orm, {
      leaseMs: LEASE_MS,
      streamedAfterMs,
      lostAfterMs,
      transactionalAfterMs: TRANSACTIONAL_AFTER_MS,
      batch: BATCH,
      perTenant: PER_TENANT,
    });
    let started = 0;
    // One charge that cannot be started now (Temporal slow, its workflow's id refused) is left
    // for its next lease; the rest of the batch goes on.
    for (const call of due) {
      if (stopped) break;
      try {
        if (call.mode === 'transactional' && !(await closedWorkflowClass(deps.temporal, call.invocationId))) continue;
        await startMeteredCharge(deps.temporal, deps.taskQueue, call, START_DEADLINE_MS);
        started++;
      } catch (err) {
        deps.log.warn({ invocationId: call.invocationId, err: errorKind(err) }, 'could not start a due charge');
      }
    }
    return started;
  }

  const rounds = runRounds(everyMs, runOnce, (err) =>
    deps.log.warn({ err: errorKind(err) }, 'due-charges round failed'),
  );
  return {
    runOnce,
    async stop() {
      stopped = true;
      await rounds.stop();
    },
  };
}
