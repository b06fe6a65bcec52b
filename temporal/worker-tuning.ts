// The tuning every worker of the project runs with, apart from what it runs. bench/throughput.ts
// runs its bare baseline worker with the same options, so a comparison is between workflows,
// not settings.
import type { WorkerOptions } from '@temporalio/worker';

/**
 * `activityGraceMs`: how long a worker told to stop (SIGTERM) lets its running activities finish
 * before cancelling them: the longest an activity's own work may take. Past it the SDK cancels
 * them, and 10 s later forces the shutdown.
 */
export function workerTuning(activityGraceMs: number) {
  return {
    maxCachedWorkflows: 1000,
    shutdownGraceTime: activityGraceMs,
    shutdownForceTime: activityGraceMs + 10_000,
  } satisfies Partial<WorkerOptions>;
}

/**
 * A gateway worker's grace: an upstream call's deadline and 5 s to record its outcome, so a
 * rolling restart never cuts a call short (a cut call is not re-sent unless the agent allows it).
 */
export const gatewayActivityGraceMs = (upstreamTimeoutMs: number): number => upstreamTimeoutMs + 5_000;

/** A facilitator worker's: its activities are short chain calls, and one cut off is retried on another worker. */
export const FACILITATOR_ACTIVITY_GRACE_MS = 10_000;
