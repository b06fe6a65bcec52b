// Starting a transactional call's InvocationWorkflow. The call was accepted before (its row,
// its body and so its intent to start are committed; the 202 followed): the accepting process
// starts the workflow right after (api/invoke/transactional.ts), and the start relay (start-relay.ts) starts any intent whose
// start is not known to have happened. Both start the same way: workflow id = invocation id,
// USE_EXISTING (a second start of a running call attaches to it) and REJECT_DUPLICATE (a call
// whose workflow closed is never run again). A start is bounded (WORKFLOW_START_DEADLINE_MS,
// 2 s by default; a start takes ~4 ms here) instead of waiting out the SDK's ~20 s of retries.
import type { Client, WorkflowHandle } from '@temporalio/client';
import { AgentId, InvocationStatus, TenantId } from './search-attributes.ts';
import { withCallDeadline } from './client.ts';

/**
 * InvocationWorkflow's input (workflows/invocation.ts `InvocationInput`, which workflows/ keeps:
 * it imports this floor's search attributes, so this floor does not import it back; the
 * workflow tests check the two agree).
 */
export type InvocationStartInput = {
  invocationId: string;
  tenantId: string;
  agentId: string;
  emitReceipts: boolean;
  outcomeStatusOnly: true;
};

/** What a start needs of the call's agent. */
export type StartedAgent = { id: string; name: string; emitReceipts: boolean };

export function startInvocationWorkflow(
  temporal: Client,
  taskQueue: string,
  invocationId: string,
  tenantId: string,
  agent: StartedAgent,
  deadlineMs: number,
): Promise<WorkflowHandle> {
  const input: InvocationStartInput = {
    invocationId,
    tenantId,
    agentId: agent.id,
    emitReceipts: agent.emitReceipts,
    outcomeStatusOnly: true,
  };
  return withCallDeadline(temporal, deadlineMs, () =>
    temporal.workflow.start('InvocationWorkflow', {
      taskQueue,
      workflowId: invocationId,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      typedSearchAttributes: [
        { key: TenantId, value: tenantId },
        { key: AgentId, value: agent.id },
        { key: InvocationStatus, value: 'pending' },
      ],
      staticSummary: `${agent.name} (${agent.id})`,
    }),
  );
}
