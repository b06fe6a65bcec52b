// The background rounds every gateway API process runs beside its listener: the start relay
// (start-relay.ts), the closed-workflow check (unfinished-calls.ts), the due-charges round
// (charges-due.ts), the analytics fold and summaries
// (gateway/analytics/fold.ts, summaries.ts) and the purge of expired x402 A2A payment tasks
// (gateway/a2a/payment-tasks.ts). They live below the door, which only starts them
// (api/wiring.ts); each round runs whoever accepted the calls it serves.
import type { Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import type { GatewayConfig } from '../gateway/config.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import { queryRows } from '../gateway/db/orm.ts';
import { summarizeInBackground } from '../gateway/analytics/summaries.ts';
import { foldInBackground } from '../gateway/analytics/fold.ts';
import { createPaymentTasks, purgeExpiredInBackground } from '../gateway/a2a/payment-tasks.ts';
import { startRelay, type HeldStarts } from './start-relay.ts';
import { checkUnfinishedCalls } from './unfinished-calls.ts';
import { startDueCharges } from './charges-due.ts';

/** Starts the rounds; `stop` ends them all. */
export function startGatewayJobs(deps: {
  config: GatewayConfig;
  db: GatewayDb;
  temporal: Client;
  log: Logger;
  /** This process's start backlog, whose places the relay gives back. */
  backlog: HeldStarts;
}): { stop(): Promise<void> } {
  const { config, db: orm, temporal, log } = deps;
  const relay = startRelay({
    orm,
    temporal,
    taskQueue: config.temporal.taskQueue,
    startDeadlineMs: config.workflowStartDeadlineMs,
    log,
    backlog: deps.backlog,
  });
  const unfinished = checkUnfinishedCalls({ orm, temporal, log });
  const charges = startDueCharges({ orm, temporal, taskQueue: config.temporal.taskQueue, log });
  const fold = foldInBackground(orm, log, config.analytics.foldEveryMs);
  const summaries = summarizeInBackground(orm, log);
  const paymentTasks = purgeExpiredInBackground(createPaymentTasks(queryRows(orm)), (err) =>
    log.warn({ err: (err as Error).message }, 'payment task purge round failed'),
  );
  return {
    async stop() {
      await Promise.all([
        relay.stop(),
        unfinished.stop(),
        charges.stop(),
        fold.stop(),
        summaries.stop(),
        paymentTasks.stop(),
      ]);
    },
  };
}
