// The due-charges round: a metered call whose charge is still due a while after it completed
// gets its MeteredChargeWorkflow started (charge-start.ts). A streamed call's process starts it
// as its stream ends, so this round catches what a process left: it died between the row's
// completion and the start, Temporal was unreachable then, or the lost-stream sweep closed the
// row (gateway/invocations/stale-streams.ts). A transactional call settles in its own workflow;
// one still due long after (its workflow terminated) is started here too. Every CHECK_EVERY_MS
// each API process leases a batch (two processes never start the same charge at once; the
// workflow id makes a second start harmless anyway).
import type { Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import { leaseDueCharges } from '../gateway/payment/charges-due.ts';
import { temporalKnownDown } from './client.ts';
import { startMeteredCharge } from './charge-start.ts';

const CHECK_EVERY_MS = 10_000;
/** A streamed call's process starts its charge within a second of its completion. */
const STREAMED_AFTER_MS = 15_000;
/** A transactional call's workflow settles its charge itself, retrying for up to a day. */
const TRANSACTIONAL_AFTER_MS = 25 * 60 * 60 * 1000;
/** A leased charge is not started again before this. */
const LEASE_MS = 5 * 60_000;
const BATCH = 100;
const START_DEADLINE_MS = 2_000;

export function startDueCharges(deps: {
  orm: GatewayDb;
  temporal: Client;
  taskQueue: string;
  log: Logger;
  everyMs?: number;
  streamedAfterMs?: number;
}): { runOnce(): Promise<number>; stop(): Promise<void> } {
  const { everyMs = CHECK_EVERY_MS, streamedAfterMs = STREAMED_AFTER_MS } = deps;
  let stopped = false;

  async function runOnce(): Promise<number> {
    if (temporalKnownDown(deps.temporal)) return 0;
    const due = await leaseDueCharges(deps.orm, {
      leaseMs: LEASE_MS,
      streamedAfterMs,
      transactionalAfterMs: TRANSACTIONAL_AFTER_MS,
      batch: BATCH,
    });
    let started = 0;
    for (const call of due) {
      if (stopped) break;
      await startMeteredCharge(deps.temporal, deps.taskQueue, call, START_DEADLINE_MS);
      started++;
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
