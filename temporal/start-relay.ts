// The start relay: every accepted transactional call gets its InvocationWorkflow, even when the
// process that accepted it died before starting it or Temporal was unreachable then. A `pending`
// transactional row is its call's intent to start; the accepting process starts it right after
// its 202, and every RELAY_EVERY_MS each API process starts the intents older than the start
// deadline plus RELAY_MARGIN_MS that no relay has started (by then the accepting process's own
// start has usually ended; one still queued behind its other starts is the same idempotent
// start). A relay leases its batch first (start_lease_until), so two relays do not start the
// same row at once; the start itself is idempotent (invocation-start.ts: USE_EXISTING,
// REJECT_DUPLICATE). A row whose workflow closed without moving it (terminated by an operator)
// is closed as the closed-workflow check closes one (unfinished-calls.ts): failed, saying why,
// its body deleted and its payment released, as its call never ran.
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import { dropLeases, knownStarted, leaseIntents, markStarted, type Intent } from '../gateway/invocations/intents.ts';
import { closeUnfinished } from '../gateway/invocations/store.ts';
import { temporalKnownDown } from './client.ts';
import { closedWorkflowClass } from './unfinished-calls.ts';
import { startInvocationWorkflow } from './invocation-start.ts';

const RELAY_EVERY_MS = 1_000;
/** Past the start deadline (WORKFLOW_START_DEADLINE_MS): an intent the accepting process has usually given up on. */
const RELAY_MARGIN_MS = 1_000;
const LEASE_MS = 30_000;
const BATCH = 200;

export type StartRelay = {
  /** One round; returns how many workflows it started. */
  runOnce(): Promise<number>;
  stop(): Promise<void>;
};

/** The accepting process's bound on calls whose start is not yet known (api/proxy/start-backlog.ts). */
export type HeldStarts = {
  /** The accepted calls still held. */
  held(): string[];
  /** Gives back the places of calls now known started. */
  releaseStarted(invocationIds: string[]): void;
};

export type StartRelayDeps = {
  orm: GatewayDb;
  temporal: Client;
  taskQueue: string;
  /** How long one start may take (WORKFLOW_START_DEADLINE_MS): the relay's and the accepting process's. */
  startDeadlineMs: number;
  log: Logger;
  /** This process's backlog: the places of calls a relay started are given back. */
  backlog?: HeldStarts;
  everyMs?: number;
  afterMs?: number;
};

export function startRelay(deps: StartRelayDeps): StartRelay {
  const { everyMs = RELAY_EVERY_MS, afterMs = deps.startDeadlineMs + RELAY_MARGIN_MS } = deps;
  let stopped = false;

  async function reconcile(): Promise<void> {
    const held = deps.backlog?.held() ?? [];
    if (!held.length) return;
    deps.backlog?.releaseStarted(await knownStarted(deps.orm, held));
  }

  async function startOne(intent: Intent): Promise<'started' | 'closed'> {
    try {
      await startInvocationWorkflow(
        deps.temporal,
        deps.taskQueue,
        intent.id,
        intent.tenant_id,
        {
          id: intent.agent_id,
          name: intent.agent_name,
          emitReceipts: intent.emit_receipts,
        },
        deps.startDeadlineMs,
      );
      return 'started';
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return 'closed';
      throw err;
    }
  }

  /** The intent's workflow closed before it moved the row: closed saying why. */
  async function closeClosed(id: string): Promise<void> {
    const errorClass = await closedWorkflowClass(deps.temporal, id);
    if (errorClass) await closeUnfinished(deps.orm, id, errorClass);
  }

  async function runOnce(): Promise<number> {
    await reconcile();
    if (temporalKnownDown(deps.temporal)) return 0;
    const due = await leaseIntents(deps.orm, { leaseMs: LEASE_MS, afterMs, batch: BATCH });
    const started: string[] = [];
    let unreachable: unknown;
    for (const [i, intent] of due.entries()) {
      if (stopped) break;
      try {
        if ((await startOne(intent)) === 'started') started.push(intent.id);
        else await closeClosed(intent.id);
      } catch (err) {
        // Temporal unreachable again: the rest is left for a later round, leases dropped.
        unreachable = err;
        await dropLeases(
          deps.orm,
          due.slice(i).map((d) => d.id),
        );
        break;
      }
    }
    if (started.length) {
      await markStarted(deps.orm, started);
      deps.backlog?.releaseStarted(started);
      deps.log.info({ started: started.length }, 'start relay started accepted calls');
    }
    if (unreachable) deps.log.warn({ err: errorKind(unreachable) }, 'start relay: Temporal unreachable');
    return started.length;
  }

  const rounds = runRounds(everyMs, runOnce, (err) =>
    deps.log.warn({ err: errorKind(err) }, 'start relay round failed'),
  );

  return {
    runOnce,
    async stop() {
      stopped = true;
      await rounds.stop();
    },
  };
}
