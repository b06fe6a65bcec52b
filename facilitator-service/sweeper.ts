// The outbox sweeper. A /settle handler claims and sends on the strength of its PostgreSQL
// records (the stored request and the settlement row), with its workflow start issued alongside
// and not waited for. Every such settlement must still get its SettlementWorkflow (operators
// find settlements in the Temporal UI; the workflow's activity finishes what a dead process
// left half done: delivery of the stored bytes, the record, the watcher). When the start failed
// (Temporal unreachable) or the process died before it, the request stays unmarked; every few
// seconds this starts the workflow of each one older than a few seconds, with the same id and
// policies as the handler (idempotent: a workflow that exists is found, a closed one is left
// closed), and marks it. Every facilitator process runs one; they may overlap harmlessly.
// It also starts the watcher again of a settlement still `pending` past its validBefore plus the
// same delay (a revert or a mined cancel with the authorization unused stays pending until the
// chain passes validBefore, and its watcher then decides it within seconds): one whose watcher
// was lost (terminated by an operator, say) is decided rather than left pending for good.
// And it starts a watcher for a settlement signed but idle for longer than a live run leaves one
// (the confirm step's bound plus the same delay): its run is gone, and its bytes, perhaps never
// sent or lost by the node, hold the gas wallet's nonce, so every later settlement of the wallet
// would wait behind them. The watcher sends them again and records whichever attempt is mined.
import type { Client } from '@temporalio/client';
import type pg from 'pg';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import { unstartedSettlements } from '../facilitator/store/requests.ts';
import { idleInFlight, overduePending } from '../facilitator/store/records.ts';
import { AFTER_SIGNING_MARGIN_MS } from '../activities/settlement/types.ts';
import { recordWorkflowStart, startSettlementWorkflow, startWatchWorkflow } from './workflow-start.ts';

const BATCH = 100;

export type Sweeper = { sweepOnce(): Promise<number>; stop(): Promise<void> };

export function startSweeper(deps: {
  pool: pg.Pool;
  temporal: Client;
  config: FacilitatorConfig;
  log: Logger;
}): Sweeper {
  const { everyMs, afterMs } = deps.config.sweep;
  // The longest a live run leaves a signed record untouched: its confirm step's bound (the
  // settlement workflow's activity timeout), then the sweep's own delay.
  const inFlightIdleMs = deps.config.inclusionTimeoutMs + AFTER_SIGNING_MARGIN_MS + afterMs;
  let stopped = false;

  async function sweepOnce(): Promise<number> {
    const due = await unstartedSettlements(deps.pool, afterMs, BATCH);
    let started = 0;
    for (const { key, payer, summary } of due) {
      if (stopped) break;
      const ok = await recordWorkflowStart(
        deps.pool,
        key,
        startSettlementWorkflow(deps.temporal, deps.config, key, { payer, summary }, false),
      );
      // Temporal still unreachable: the rest waits for the next round.
      if (!ok) break;
      started++;
    }
    if (started > 0) deps.log.info({ started }, 'sweeper started settlement workflows');
    const watched = await startWatchers(() => overduePending(deps.pool, afterMs, BATCH));
    if (watched > 0) deps.log.info({ watched }, 'sweeper started watchers of overdue pending settlements');
    const resumed = await startWatchers(() => idleInFlight(deps.pool, inFlightIdleMs, BATCH));
    if (resumed > 0) deps.log.info({ resumed }, 'sweeper started watchers of signed settlements whose run is gone');
    return started + watched + resumed;
  }

  /** Starts the watcher of each settlement `due` names, until Temporal refuses one; how many it started. */
  async function startWatchers(due: () => Promise<string[]>): Promise<number> {
    let count = 0;
    for (const key of stopped ? [] : await due()) {
      const ok = await startWatchWorkflow(deps.temporal, deps.config, key).then(
        () => true,
        () => false,
      );
      if (!ok) break;
      count++;
    }
    return count;
  }

  const rounds = runRounds(everyMs, sweepOnce, (err) =>
    deps.log.warn({ err: errorKind(err) }, 'settlement sweep failed'),
  );

  return {
    sweepOnce,
    async stop() {
      stopped = true;
      await rounds.stop();
    },
  };
}
