// One transactional invocation. The workflow only orders the steps and keeps the Web UI's
// search attributes true; the upstream call and every database write are in the activity,
// which receives ids, never bodies or secrets (those stay in PostgreSQL: the claim check).
import { ActivityFailure, ApplicationFailure, proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
import type { InvocationActivities, InvocationOutcome } from '../activities/invocation.ts';
import { ErrorClass, InvocationStatus } from '../temporal/search-attributes.ts';

export type InvocationInput = { invocationId: string; tenantId: string; agentId: string };

const { performInvocation } = proxyActivities<InvocationActivities>({
  // The activity bounds the upstream call itself (its deadline is shorter than this);
  // the heartbeat timeout lets a crashed worker's attempt be retried within seconds.
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 20 },
});

const { abandonInvocation } = proxyActivities<InvocationActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

export async function InvocationWorkflow(input: InvocationInput): Promise<InvocationOutcome> {
  upsertSearchAttributes([{ key: InvocationStatus, value: 'running' }]);
  let outcome: InvocationOutcome;
  try {
    outcome = await performInvocation(input.invocationId);
  } catch (err) {
    // performInvocation records every upstream outcome itself; reaching here means it could
    // not (its retries ran out), so the row is closed as failed rather than left running.
    const cause = err instanceof ActivityFailure ? err.cause : undefined;
    outcome = await abandonInvocation(input.invocationId, cause instanceof ApplicationFailure ? (cause.type ?? null) : null);
  }
  upsertSearchAttributes([
    { key: InvocationStatus, value: outcome.status },
    ...(outcome.errorClass ? [{ key: ErrorClass, value: outcome.errorClass }] : []),
  ]);
  return outcome;
}
