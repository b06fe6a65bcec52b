// Policy decision retention: deletes the decisions older than the retention period in bounded
// batches. Started by the Temporal Schedule `policy-decision-retention`
// (temporal/retention-schedule.ts), so each run is visible in the Web UI. Deterministic: the
// cutoff comes from workflow time once per purge and is carried across continue-as-new; all
// I/O is in the activity.
import { continueAsNew, patched, proxyActivities } from '@temporalio/workflow';
import type { RetentionActivities } from '../activities/retention.ts';

export type RetentionInput = {
  retentionDays: number;
  /** BODY_RETENTION_DAYS: captured bodies older than this go too (0 or absent: kept). */
  bodyRetentionDays?: number;
  /** A2A_TASK_RETENTION_DAYS: A2A task bindings first seen longer ago go too (0 or absent: kept). */
  a2aTaskRetentionDays?: number;
  /** MCP_SERVER_SESSION_RETENTION_DAYS: virtual MCP server sessions unused longer go too (0 or absent: kept). */
  mcpSessionRetentionDays?: number;
  /**
   * UNBOUND_PAYMENT_RETENTION_MINUTES: the signed payments of payment bindings never bound to a
   * call, last written longer ago, are cleared (absent: kept).
   */
  unboundPaymentRetentionMinutes?: number;
  /** Rows per delete statement. */
  batchSize?: number;
  /** Batches before the run continues as new, so one run's history stays small. */
  maxBatchesPerRun?: number;
  /** Set by the workflow when it continues as new: the same cutoff for the whole purge. */
  cutoffMs?: number;
  /** Deleted by the earlier runs of this purge. */
  deletedBefore?: number;
};

export type RetentionResult = { deleted: number; cutoff: string };

const DAY_MS = 86_400_000;
const MINUTE_MS = 60_000;

const { purgePolicyDecisions, purgeCapturedBodies, purgeA2aTasks, purgeMcpServerSessions, purgeUnboundSignedPayments } =
  proxyActivities<RetentionActivities>({
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 10 },
  });

export async function PolicyDecisionRetentionWorkflow(input: RetentionInput): Promise<RetentionResult> {
  const batchSize = input.batchSize ?? 1000;
  const maxBatches = input.maxBatchesPerRun ?? 100;
  // Captured bodies first, in their own bounded batches (the patch keeps older histories replaying).
  if (input.bodyRetentionDays && input.cutoffMs === undefined && patched('captured-body-retention')) {
    const bodyCutoffMs = Date.now() - input.bodyRetentionDays * DAY_MS;
    for (let batch = 0; batch < maxBatches; batch++) {
      if ((await purgeCapturedBodies({ olderThanMs: bodyCutoffMs, limit: batchSize })) < batchSize) break;
    }
  }
  // A2A task bindings likewise, in their own bounded batches.
  if (input.a2aTaskRetentionDays && input.cutoffMs === undefined && patched('a2a-task-retention')) {
    const taskCutoffMs = Date.now() - input.a2aTaskRetentionDays * DAY_MS;
    for (let batch = 0; batch < maxBatches; batch++) {
      if ((await purgeA2aTasks({ olderThanMs: taskCutoffMs, limit: batchSize })) < batchSize) break;
    }
  }
  // Virtual MCP server sessions likewise, by when they were last used.
  if (input.mcpSessionRetentionDays && input.cutoffMs === undefined && patched('mcp-server-session-retention')) {
    const sessionCutoffMs = Date.now() - input.mcpSessionRetentionDays * DAY_MS;
    for (let batch = 0; batch < maxBatches; batch++) {
      if ((await purgeMcpServerSessions({ olderThanMs: sessionCutoffMs, limit: batchSize })) < batchSize) break;
    }
  }
  // Signed payments of bindings never bound to a call likewise: usable authorizations of the
  // payer's money with nothing to charge, kept no longer than the bound.
  if (
    input.unboundPaymentRetentionMinutes &&
    input.cutoffMs === undefined &&
    patched('unbound-signed-payment-retention')
  ) {
    const paymentCutoffMs = Date.now() - input.unboundPaymentRetentionMinutes * MINUTE_MS;
    for (let batch = 0; batch < maxBatches; batch++) {
      if ((await purgeUnboundSignedPayments({ olderThanMs: paymentCutoffMs, limit: batchSize })) < batchSize) break;
    }
  }
  const cutoffMs = input.cutoffMs ?? Date.now() - input.retentionDays * DAY_MS;
  let deleted = input.deletedBefore ?? 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const n = await purgePolicyDecisions({ olderThanMs: cutoffMs, limit: batchSize });
    deleted += n;
    if (n < batchSize) return { deleted, cutoff: new Date(cutoffMs).toISOString() };
  }
  return continueAsNew<typeof PolicyDecisionRetentionWorkflow>({ ...input, cutoffMs, deletedBefore: deleted });
}
