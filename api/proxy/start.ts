// Starting a transactional call's InvocationWorkflow, and what the route does when Temporal
// cannot be reached. A start is bounded (START_DEADLINE_MS) instead of waiting out the SDK's
// ~20 s of retries; while the client's channel is known down the call is refused before its
// row is written. A start that failed may still have reached the server (a deadline, a lost
// answer): the route then removes the row only if no attempt has claimed it, so the workflow
// either runs the call (and the caller gets its 202) or finds no row and sends nothing.
import type { Client, WorkflowHandle } from '@temporalio/client';
import type { Agent } from '../../gateway/db/entities.ts';
import { ApiError } from '../errors.ts';
import { AgentId, InvocationStatus, TenantId } from '../../temporal/search-attributes.ts';
import { temporalKnownDown, withCallDeadline } from '../../temporal/client.ts';
import type { InvocationInput } from '../../workflows/invocation.ts';

/** How long a call waits for its workflow start before its 503 (a start takes ~4 ms here). */
export const START_DEADLINE_MS = 2_000;

export function temporalUnavailable(): ApiError {
  return new ApiError(503, 'service temporarily unavailable', { 'Retry-After': '1' });
}

/** Refuses the call at once while Temporal is known unreachable (nothing written, nothing taken). */
export function assertTemporalReachable(temporal: Client): void {
  if (temporalKnownDown(temporal)) throw temporalUnavailable();
}

export function startInvocationWorkflow(
  temporal: Client,
  taskQueue: string,
  invocationId: string,
  tenantId: string,
  agent: Agent,
): Promise<WorkflowHandle> {
  const input: InvocationInput = { invocationId, tenantId, agentId: agent.id, emitReceipts: agent.emitReceipts };
  return withCallDeadline(temporal, START_DEADLINE_MS, () =>
    temporal.workflow.start('InvocationWorkflow', {
      taskQueue,
      workflowId: invocationId,
      args: [input],
      typedSearchAttributes: [
        { key: TenantId, value: tenantId },
        { key: AgentId, value: agent.id },
        { key: InvocationStatus, value: 'pending' },
      ],
      staticSummary: `${agent.name} (${agent.id})`,
    }),
  );
}

/**
 * After a start that failed and a row that was then removed: should the start have reached the
 * server after all, its workflow is ended now rather than after its activity's retries find no
 * row (it sends nothing either way). Best effort, in the background.
 */
export function terminateIfStarted(temporal: Client, invocationId: string): void {
  void withCallDeadline(temporal, START_DEADLINE_MS * 2, () =>
    temporal.workflow.getHandle(invocationId).terminate('invocation not accepted: its start failed'),
  ).catch(() => undefined);
}
