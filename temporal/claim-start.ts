// Starting a tenant's ChannelClaimWorkflow (workflows/channel-claims.ts): workflow id
// `claims-<tenant>`, USE_EXISTING (a round already running takes the start: two rounds of a
// tenant never claim at once) and ALLOW_DUPLICATE (every round after the last is a new run; each
// is visible in the Web UI under the same id, with the reason it started).
import type { Client, WorkflowHandle } from '@temporalio/client';
import { TenantId } from './search-attributes.ts';
import { withCallDeadline } from './client.ts';

/** ChannelClaimWorkflow's input (workflows/channel-claims.ts `ChannelClaimInput`). */
type ChannelClaimStartInput = { tenantId: string; reason: string };

export const claimWorkflowId = (tenantId: string) => `claims-${tenantId}`;

export function startChannelClaims(
  temporal: Client,
  taskQueue: string,
  round: ChannelClaimStartInput,
  deadlineMs: number,
): Promise<WorkflowHandle> {
  return withCallDeadline(temporal, deadlineMs, () =>
    temporal.workflow.start('ChannelClaimWorkflow', {
      taskQueue,
      workflowId: claimWorkflowId(round.tenantId),
      args: [round],
      workflowIdConflictPolicy: 'USE_EXISTING',
      workflowIdReusePolicy: 'ALLOW_DUPLICATE',
      typedSearchAttributes: [{ key: TenantId, value: round.tenantId }],
      staticSummary: `channel claims of ${round.tenantId} (${round.reason})`,
    }),
  );
}
