// Starting a settlement's workflow: one deterministic id per authorization, USE_EXISTING (a
// duplicate attaches to the running settlement) and REJECT_DUPLICATE (a closed one is never run
// again). Used by the /settle handler (eagerly, when a worker runs in this process) and by the
// outbox sweeper; both then record on the request that the workflow exists.
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type pg from 'pg';
import type { SettlementWatchWorkflow, SettlementWorkflow } from '../workflows/settlement.ts';
import { Payer, SettlementStatus } from '../temporal/search-attributes.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import { markWorkflowStarted } from '../facilitator/store/requests.ts';

export type WorkflowLabels = { payer: string; summary: string };

export function startSettlementWorkflow(
  temporal: Client,
  config: FacilitatorConfig,
  key: string,
  labels: WorkflowLabels,
  eager: boolean,
): Promise<WorkflowHandle<typeof SettlementWorkflow> & { eagerlyStarted?: boolean }> {
  return temporal.workflow.start<typeof SettlementWorkflow>('SettlementWorkflow', {
    taskQueue: config.temporal.taskQueue,
    workflowId: key,
    args: [{ key, inclusionTimeoutMs: config.inclusionTimeoutMs }],
    workflowIdConflictPolicy: 'USE_EXISTING',
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
    requestEagerStart: eager,
    typedSearchAttributes: [
      // Lowercase hex, like the workflow id: a Web UI query typed in lowercase finds it.
      { key: Payer, value: labels.payer.toLowerCase() },
      { key: SettlementStatus, value: 'received' },
    ],
    // Amount, recipient and payer only: the signature never enters a history.
    staticSummary: labels.summary,
  });
}

/**
 * Starts the watcher of a pending settlement (the one SettlementWorkflow starts as its child,
 * same id): USE_EXISTING finds a running one; a closed one is started again (its record is still
 * pending, so it decided nothing).
 */
export function startWatchWorkflow(temporal: Client, config: FacilitatorConfig, key: string): Promise<unknown> {
  return temporal.workflow.start<typeof SettlementWatchWorkflow>('SettlementWatchWorkflow', {
    taskQueue: config.temporal.taskQueue,
    workflowId: `watch:${key}`,
    args: [{ key }],
    workflowIdConflictPolicy: 'USE_EXISTING',
    workflowIdReusePolicy: 'ALLOW_DUPLICATE',
  });
}

/**
 * Records, once the start settled, whether the workflow exists: started or attached, or closed
 * already (REJECT_DUPLICATE). Anything else (Temporal unreachable) leaves the request for the
 * sweeper. Never rejects.
 */
export async function recordWorkflowStart(pool: pg.Pool, key: string, starting: Promise<unknown>): Promise<boolean> {
  try {
    await starting;
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) return false;
  }
  await markWorkflowStarted(pool, key).catch(() => undefined);
  return true;
}
