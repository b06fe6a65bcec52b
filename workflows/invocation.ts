// One transactional invocation. The workflow only orders the steps and keeps the Web UI's
// search attributes true; the upstream call and every database write are in the activity,
// which receives ids, never bodies or secrets (those stay in PostgreSQL: the claim check).
import { proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
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

export async function InvocationWorkflow(input: InvocationInput): Promise<InvocationOutcome> {
  upsertSearchAttributes([{ key: InvocationStatus, value: 'running' }]);
  const outcome = await performInvocation(input.invocationId);
  upsertSearchAttributes([
    { key: InvocationStatus, value: outcome.status },
    ...(outcome.errorClass ? [{ key: ErrorClass, value: outcome.errorClass }] : []),
  ]);
  return outcome;
}
