// Starting a streamed metered call's MeteredChargeWorkflow (workflows/charge.ts) once its row is
// complete: by the process that streamed it, right after its completion commits, and by the
// due-charges round (charges-due.ts) for any charge still due later. Both start it the same way:
// workflow id `charge-<invocation id>`, USE_EXISTING (a second start attaches to the first) and
// ALLOW_DUPLICATE_FAILED_ONLY (a run that ended without recording may run again; the settle is
// idempotent, so a charge is still collected once).
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
      // A run that closed without recording the charge (terminated, failed) may run again; one
      // that recorded it left the row no longer due, so nothing starts it.
      workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
      typedSearchAttributes: [
        { key: TenantId, value: call.tenantId },
        { key: AgentId, value: call.agent.id },
      ],
      staticSummary: `charge of ${call.invocationId}: ${call.agent.name} (${call.agent.id})`,
    }),
  );
}

/**
 * The charge's settlement, when its workflow answers within `withinMs`; null otherwise. The wait
 * is aborted at its deadline, so no long poll of the workflow's history outlives it.
 */
export async function settledWithin(
  temporal: Client,
  handle: WorkflowHandle,
  withinMs: number,
): Promise<SettledCharge | null> {
  if (withinMs <= 0) return null;
  try {
    return (await temporal.withAbortSignal(AbortSignal.timeout(withinMs), () => handle.result())) as SettledCharge;
  } catch {
    return null;
  }
}
