// A metered (x402 `upto`) call's charge, settled once its answer is complete: a step of
// InvocationWorkflow for a transactional call, and MeteredChargeWorkflow for a streamed one
// (started when its stream ends, or by the due-charges round: temporal/charges-due.ts). The
// activity loads everything by invocation id; no payment, signature or body is in the history.
import { ActivityFailure, proxyActivities } from '@temporalio/workflow';
import type { ChargeActivities, ChargeOutcome } from '../activities/charges.ts';
import type { ReceiptActivities } from '../activities/receipts.ts';

// The facilitator awaits the transfer's inclusion within one request (SETTLEMENT_TIMEOUT_MS);
// an outcome not known is asked again, with backoff, for a day, then recorded failed.
const { settleMeteredCharge } = proxyActivities<ChargeActivities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '10 seconds',
  scheduleToCloseTimeout: '24 hours',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

const { abandonMeteredCharge } = proxyActivities<ChargeActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

const { issueReceipt } = proxyActivities<ReceiptActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

/** Settles the call's charge; a charge whose outcome stayed unknown past every retry is recorded failed. */
export async function settleCharge(invocationId: string): Promise<ChargeOutcome> {
  try {
    return await settleMeteredCharge(invocationId);
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    return abandonMeteredCharge(invocationId);
  }
}

export type MeteredChargeInput = {
  invocationId: string;
  /** The agent's emit_receipts when the call was accepted: its receipt follows the charge. */
  emitReceipts: boolean;
};

export async function MeteredChargeWorkflow(input: MeteredChargeInput): Promise<ChargeOutcome> {
  const outcome = await settleCharge(input.invocationId);
  // The receipt names the charge and its transaction, so it is signed once they are known.
  if (input.emitReceipts) await issueReceipt(input.invocationId);
  return outcome;
}
