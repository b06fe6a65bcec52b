// One transactional invocation. The workflow only orders the steps and keeps the Web UI's
// search attributes true; the upstream call and every database write are in the activity,
// which receives ids, never bodies or secrets (those stay in PostgreSQL, loaded by id).
import {
  ActivityFailure,
  ApplicationFailure,
  patched,
  proxyActivities,
  upsertSearchAttributes,
  type ActivityOptions,
} from '@temporalio/workflow';
import { settleCharge } from './charge.ts';
import type { InvocationActivities, InvocationOutcome } from '../activities/invocation.ts';
import { ErrorClass, InvocationStatus } from '../temporal/search-attributes.ts';
import type { ReceiptActivities } from '../activities/receipts.ts';

export type InvocationInput = {
  invocationId: string;
  tenantId: string;
  agentId: string;
  /** Trust receipts: the agent's emit_receipts when the call was accepted (absent in older histories). */
  emitReceipts?: boolean;
  /**
   * InvocationStatus goes from `pending` (set at the start) straight to the outcome; absent in
   * older histories, which upsert `running` first. One search-attribute update per call fewer:
   * an update is a history event and a visibility write on the server, for a state the
   * execution's own status already shows (running) and the invocation row holds.
   */
  outcomeStatusOnly?: boolean;
};

/** performInvocation's options (bench/echo-workflow.ts, the bare baseline, runs its activity with them too). */
export const invocationActivityOptions: ActivityOptions = {
  // The activity bounds the upstream call itself (its deadline is shorter than this);
  // the heartbeat timeout lets a crashed worker's attempt be retried within seconds.
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '10 seconds',
  retry: {
    initialInterval: '200 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '10 seconds',
    maximumAttempts: 20,
  },
};

const { performInvocation } = proxyActivities<InvocationActivities>(invocationActivityOptions);

const { abandonInvocation } = proxyActivities<InvocationActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

// Trust receipts: the receipt is signed in the completion path, after the row is terminal,
// and retried until it is stored (the activity is idempotent), so no completed invocation of
// a receipt-emitting agent is left without one.
const { issueReceipt } = proxyActivities<ReceiptActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

export async function InvocationWorkflow(input: InvocationInput): Promise<InvocationOutcome> {
  if (!input.outcomeStatusOnly) upsertSearchAttributes([{ key: InvocationStatus, value: 'running' }]);
  let outcome: InvocationOutcome;
  try {
    outcome = await performInvocation(input.invocationId);
  } catch (err) {
    // performInvocation records every upstream outcome itself; reaching here means it could
    // not (its retries ran out), so the row is closed as failed rather than left running.
    const cause = err instanceof ActivityFailure ? err.cause : undefined;
    outcome = await abandonInvocation(
      input.invocationId,
      cause instanceof ApplicationFailure ? (cause.type ?? null) : null,
    );
  }
  upsertSearchAttributes([
    { key: InvocationStatus, value: outcome.status },
    ...(outcome.errorClass ? [{ key: ErrorClass, value: outcome.errorClass }] : []),
  ]);
  // A metered call's charge, once its answer is complete (workflows/charge.ts): before the
  // receipt, which names it. Only a metered call's outcome says so, and only new histories hold
  // the step (the patch marker).
  if (outcome.chargeDue && patched('metered-charge')) await settleCharge(input.invocationId);
  // Only when asked: histories recorded without the flag replay without this step.
  if (input.emitReceipts) await issueReceipt(input.invocationId);
  return outcome;
}
