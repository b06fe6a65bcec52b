// Starting a streamed metered call's MeteredChargeWorkflow (workflows/charge.ts) once its row is
// complete: by the process that streamed it, right after its completion commits, and by the
// due-charges round (charges-due.ts) for any charge still due later. Both start it the same way:
// workflow id `charge-<invocation id>`, USE_EXISTING (a second start attaches to the first) and
// REJECT_DUPLICATE (a charge whose workflow closed is never settled again).
import type { Client, WorkflowHandle } from '@temporalio/client';
import { AgentId, TenantId } from './search-attributes.ts';
import { withCallDeadline } from './client.ts';

/**
 * MeteredChargeWorkflow's input (workflows/charge.ts `MeteredChargeInput`, which workflows/ keeps,
 * as invocation-start.ts does for its workflow's).
 */
type MeteredChargeStartInput = { invocationId: string; emitReceipts: boolean };

/** What a charge's start needs of its call. */
export type ChargedCall = {
  invocationId: string;
  tenantId: string;
  agent: { id: string; name: string; emitReceipts: boolean };
};

/** Where a charge settled, as the workflow answers it (gateway/payment/charges.ts ChargeOutcome). */
export type SettledCharge = {
  state: string;
  charge: string | null;
  transaction: string | null;
  error: string | null;
  payer: string | null;
};

export function startMeteredCharge(
  temporal: Client,
  taskQueue: string,
  call: ChargedCall,
  deadlineMs: number,
): Promise<WorkflowHandle> {
  const input: MeteredChargeStartInput = { invocationId: call.invocationId, emitReceipts: call.agent.emitReceipts };
  return withCallDeadline(temporal, deadlineMs, () =>
    temporal.workflow.start('MeteredChargeWorkflow', {
      taskQueue,
      workflowId: `charge-${call.invocationId}`,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      typedSearchAttributes: [
        { key: TenantId, value: call.tenantId },
        { key: AgentId, value: call.agent.id },
      ],
      staticSummary: `charge of ${call.invocationId}: ${call.agent.name} (${call.agent.id})`,
    }),
  );
}

/** The charge's settlement, when its workflow answers within `withinMs`; null otherwise. */
export async function settledWithin(handle: WorkflowHandle, withinMs: number): Promise<SettledCharge | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), withinMs)));
  try {
    return await Promise.race([handle.result() as Promise<SettledCharge>, late]);
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}
