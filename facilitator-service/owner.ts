// Who settles a /settle request, and how its answer is learned. SettlementWorkflow owns every
// settlement; the handler either runs a fresh request's steps on the fast path
// (facilitator/settlement/fast-path.ts, a worker in this process) and starts the workflow once
// the outcome is known, or stores the request, starts or joins the workflow and waits for
// the recorded outcome. A submission that does not own the authorization (another account,
// other requirements) never learns the owner's transaction. Every answer is given by the
// request's deadline: 'in_flight' then.
import { getAddress } from 'ethers';
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type pg from 'pg';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import type { SettlementWorkflow } from '../workflows/settlement.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { OutcomeListener } from '../facilitator/outcomes.ts';
import { findSettlement } from '../facilitator/store/records.ts';
import { loadSettleRequest, saveSettleRequest, workflowLabels } from '../facilitator/store/requests.ts';
import { recordWorkflowStart, startSettlementWorkflow } from './workflow-start.ts';
import type { FastPath } from '../facilitator/settlement/fast-path.ts';
import type { Reads } from '../facilitator/settlement/steps.ts';
import type { SettlementRunner } from '../facilitator/settlement/runner.ts';
import type { SettlementOutcome } from '../facilitator/settlement/types.ts';
import { outcomeOfRecord } from '../facilitator/settlement/verify.ts';
import { payerNamed, sameSettlement, type SettlementRequest } from '../facilitator/settlement/request.ts';

export type OwnerDeps = {
  config: FacilitatorConfig;
  pool: pg.Pool;
  temporal: Client;
  /** The client shares a connection with a worker in this process: start workflows eagerly. */
  eagerStart: boolean;
  /** That worker's fast path: fresh requests run their steps here at once. */
  fastPath?: FastPath;
  outcomes: OutcomeListener;
  log: Logger;
};

/** The workflow's own result is asked only after this pause (the record's announcement usually comes first). */
const WORKFLOW_RESULT_FALLBACK_MS = 1_000;

const never = new Promise<never>(() => undefined);
const isFinal = (status: string) => status === 'settled' || status === 'failed';

export function createSettlementOwner(deps: OwnerDeps): SettlementRunner {
  const { config } = deps;

  /**
   * The recorded outcome of a settlement this handler does not run itself. The record decides:
   * read once (a settlement decided already is answered without Temporal), then its
   * announcement; the workflow's result is the fallback for an announcement this process
   * missed (its LISTEN connection was down), asked only after a pause so the common case costs
   * the server no history long-poll. `starting`: this handler's start of the workflow.
   */
  async function recordedOutcome(
    key: string,
    starting: ReturnType<typeof startSettlementWorkflow>,
    deadline: number,
  ): Promise<SettlementOutcome | 'in_flight'> {
    // Registered before anything below can record the outcome, so it is seen whenever it comes.
    const announced = deps.outcomes.waitFor(key);
    let timer: NodeJS.Timeout | undefined;
    let fallbackTimer: NodeJS.Timeout | undefined;
    const alreadyDecided = findSettlement(deps.pool, key).then(
      (record) => (record && isFinal(record.status) ? outcomeOfRecord(record) : never),
      () => never,
    );
    try {
      let handle: WorkflowHandle<typeof SettlementWorkflow>;
      try {
        const first = await Promise.race([
          starting.then((started) => ({ started })),
          alreadyDecided.then((decided) => ({ decided })),
        ]);
        if ('decided' in first) return first.decided;
        handle = first.started;
      } catch (err) {
        const record = await findSettlement(deps.pool, key);
        // Temporal unreachable: a final record still answers (settled through the fast path,
        // its workflow to come from the sweeper); anything else is the caller's to retry (503).
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) {
          if (record && isFinal(record.status)) return outcomeOfRecord(record);
          throw err;
        }
        // Closed: the record is the stable answer (a watcher may have updated it since the run
        // closed); without a record (guardrail refusal) the closed run's own result is.
        if (record) return outcomeOfRecord(record);
        handle = deps.temporal.workflow.getHandle<typeof SettlementWorkflow>(key);
      }
      const fromRecord = announced.promise.then((a): SettlementOutcome => ({
        status: a.status === 'settled' || a.status === 'failed' || a.status === 'rejected' ? a.status : 'pending',
        payer: getAddress(a.payer),
        transaction: a.tx,
        cause: a.cause,
      }));
      const fromWorkflow = new Promise<void>((resolve) => {
        fallbackTimer = setTimeout(resolve, WORKFLOW_RESULT_FALLBACK_MS);
      }).then(() => deps.temporal.connection.withDeadline(deadline, () => handle.result()));
      fromWorkflow.catch(() => undefined);
      const timeUp = new Promise<'in_flight'>((resolve) => {
        timer = setTimeout(() => resolve('in_flight'), Math.max(deadline - Date.now(), 0));
      });
      return await Promise.race([
        fromRecord,
        alreadyDecided,
        fromWorkflow.catch((err) => (Date.now() >= deadline - 50 ? ('in_flight' as const) : Promise.reject(err))),
        timeUp,
      ]);
    } finally {
      clearTimeout(timer);
      clearTimeout(fallbackTimer);
      announced.cancel();
    }
  }

  /**
   * Whether the request stored for `key` (the one that owns its settlement) came from this
   * account with these requirements (for upto, this charge: the first charge wins). Only then is
   * a duplicate answered with that settlement's outcome; another account, or other
   * requirements, must never learn its transaction.
   */
  async function sameSubmission(key: string, accountId: string, request: SettlementRequest): Promise<boolean> {
    const stored = await loadSettleRequest(deps.pool, key);
    return !stored || (stored.accountId === accountId && sameSettlement(stored.request, request));
  }

  /**
   * The answer to an authorization some other submission owns: a consumed nonce, as far as this
   * caller is concerned, once that settlement is decided; before, 'in_flight' (503), since its
   * transfer may still land (the caller may be the owner's own gateway under another account).
   */
  async function consumedElsewhere(key: string, request: SettlementRequest): Promise<SettlementOutcome | 'in_flight'> {
    const record = await findSettlement(deps.pool, key);
    if (record && !isFinal(record.status)) return 'in_flight';
    return {
      status: 'failed',
      payer: payerNamed(request),
      transaction: null,
      cause: 'nonce_used',
    };
  }

  /** Starts (or joins) the workflow and records on the request that it exists; the sweeper starts it otherwise. */
  function start(key: string, request: SettlementRequest) {
    const starting = startSettlementWorkflow(deps.temporal, config, key, workflowLabels(request), deps.eagerStart);
    starting.catch(() => undefined);
    void recordWorkflowStart(deps.pool, key, starting).then(
      (ok) => ok || deps.log.warn({ key }, 'settlement workflow not started; the sweeper will start it'),
    );
    return starting;
  }

  /** The request stored first (a run started without it could only wait for a retry to write it), then the workflow. */
  async function throughWorkflow(
    key: string,
    accountId: string,
    request: SettlementRequest,
    deadline: number,
  ): Promise<SettlementOutcome | 'in_flight'> {
    const stored = await saveSettleRequest(deps.pool, key, accountId, request);
    if (!stored && !(await sameSubmission(key, accountId, request))) return consumedElsewhere(key, request);
    return recordedOutcome(key, start(key, request), deadline);
  }

  /**
   * The fast path for a fresh request; its workflow is started once the outcome is known (off the
   * caller's path). Temporal unreachable does not stop the settlement: what was claimed is
   * durable, and its workflow comes once Temporal is back. A request stored before, one whose
   * settlement another run claimed, or one whose steps failed here goes through the workflow.
   */
  async function fast(
    fastPath: FastPath,
    key: string,
    accountId: string,
    request: SettlementRequest,
    deadline: number,
    reads?: Reads,
  ): Promise<SettlementOutcome | 'in_flight'> {
    const run = fastPath.run(key, accountId, request, config.inclusionTimeoutMs, reads).catch((err: unknown) => {
      // A step failed here (database or node): the workflow's activities retry it. Only the
      // error's kind is logged (error-kind.ts).
      deps.log.warn({ key, err: errorKind(err) }, 'settle steps failed on the fast path; left to the workflow');
      return null;
    });
    // The caller is answered by the deadline: a run still going on then (a slow node) goes on,
    // and its workflow is started when it ends.
    let timer: NodeJS.Timeout | undefined;
    const timeUp = new Promise<'in_flight'>((resolve) => {
      timer = setTimeout(() => resolve('in_flight'), Math.max(deadline - Date.now(), 0));
    });
    const outcome = await Promise.race([run, timeUp]).finally(() => clearTimeout(timer));
    if (outcome === 'in_flight') {
      void run.then((ended) => {
        if (ended && ended !== 'stored_before') start(key, request);
      });
      return outcome;
    }
    if (outcome && outcome !== 'stored_before') {
      start(key, request);
      return outcome;
    }
    return throughWorkflow(key, accountId, request, deadline);
  }

  return {
    read: (key, accountId, request) => deps.fastPath?.read(key, accountId, request),
    settle: (key, accountId, request, deadline, reads) =>
      deps.fastPath
        ? fast(deps.fastPath, key, accountId, request, deadline, reads)
        : throughWorkflow(key, accountId, request, deadline),
  };
}
