// One x402 settlement, exactly once. Workflow id `settle:{chainId}:{token}:{payer}:{nonce}`
// (started with USE_EXISTING + REJECT_DUPLICATE), so every /settle of one authorization
// attaches to this run or reads its result. The steps, each a local activity recorded with its
// result (patch `settlement-steps`): 1 verify → 2 reserve (guardrails, the nonce reservation,
// the transfer signed and stored; its activity is named `claimSettlement` in recorded
// histories) → 3 broadcast → 4 confirm (first-block inclusion, or the cancel at the gas nonce
// after the inclusion timeout; the record). A step that decides the settlement ends it.
// Local activities run in the worker holding the workflow task, without a server round trip
// per step. Durability does not rest on their markers: every step is idempotent against the
// facilitator's PostgreSQL records (the settlement row, the stored raw bytes with their gas nonce),
// so a run replayed after a worker crash redoes only what is missing and can only re-send the
// one stored transaction. Business rejections complete the workflow with a status; they are
// not workflow failures. Runs started before the patch replay through their branches below:
// every step in one activity (`settlement-one-activity`), or prepare and deliver.
import {
  ActivityFailure,
  ParentClosePolicy,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  startChild,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import {
  AFTER_SIGNING_MARGIN_MS,
  type SettlementActivities,
  type SettlementOutcome,
} from '../activities/settlement/types.ts';
import { ErrorClass, SettlementStatus, TxHash } from '../temporal/search-attributes.ts';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';

export type SettlementInput = { key: string; inclusionTimeoutMs: number };

// Before anything is signed, giving up is safe: nothing can reach the chain.
const beforeSigning = proxyLocalActivities<SettlementActivities>({
  startToCloseTimeout: '20 seconds',
  scheduleToCloseTimeout: '5 minutes',
  retry: { initialInterval: '100 milliseconds', backoffCoefficient: 2, maximumInterval: '5 seconds' },
});

// Once signed, the bytes may be on chain: delivery retries without limit.
function afterSigning(inclusionTimeoutMs: number) {
  return proxyLocalActivities<SettlementActivities>({
    startToCloseTimeout: inclusionTimeoutMs + AFTER_SIGNING_MARGIN_MS,
    retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
  });
}

// Each step decides itself when giving up is safe (nothing signed); delivery retries without limit.
function oneStep(inclusionTimeoutMs: number) {
  return proxyLocalActivities<SettlementActivities>({
    startToCloseTimeout: inclusionTimeoutMs + AFTER_SIGNING_MARGIN_MS,
    retry: { initialInterval: '100 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
  });
}

const watcher = proxyActivities<SettlementActivities>({
  startToCloseTimeout: '24 hours',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

function finish(outcome: SettlementOutcome): SettlementOutcome {
  upsertSearchAttributes([
    { key: SettlementStatus, value: outcome.status },
    ...(outcome.transaction ? [{ key: TxHash, value: outcome.transaction }] : []),
    ...(outcome.cause ? [{ key: ErrorClass, value: outcome.cause }] : []),
  ]);
  // The precise cause is for operators (Web UI); the caller only ever gets a coarse reason.
  setCurrentDetails(outcome.cause ? `${outcome.status}: ${outcome.cause}` : outcome.status);
  return outcome;
}

async function watchIfPending(input: SettlementInput, outcome: SettlementOutcome): Promise<void> {
  if (outcome.status !== 'pending') return;
  // Keep watching the chain after answering: the transfer may still land, and the record
  // (which later /settle calls read) must then say so. The watcher outlives this run.
  try {
    await startChild(SettlementWatchWorkflow, {
      workflowId: `watch:${input.key}`,
      args: [{ key: input.key }],
      parentClosePolicy: ParentClosePolicy.ABANDON,
    });
  } catch (err) {
    // The sweeper may have started this watcher already (a run idle past its bound: sweeper.ts):
    // it watches the same record, so this run ends with its outcome instead of failing.
    // Recorded histories without the marker failed here, and replay so.
    if (!(err instanceof WorkflowExecutionAlreadyStartedError) || !patched('watcher-started-elsewhere')) throw err;
  }
}

/** The per-step settlement: each step's result in the history, its progress in the Web UI's details. */
async function settleStepByStep(input: SettlementInput): Promise<SettlementOutcome> {
  const steps = oneStep(input.inclusionTimeoutMs);
  const verified = await steps.verifySettlement(input.key);
  if (verified.step === 'decided') return finish(verified.outcome);
  setCurrentDetails('verified');
  const reserved = verified.step === 'signed' ? verified : await steps.claimSettlement(input.key);
  if (reserved.step === 'decided') return finish(reserved.outcome);
  setCurrentDetails(`signed: ${reserved.txHash}`);
  const sent = await steps.broadcastSettlement(input.key);
  if (sent.step === 'decided') return finish(sent.outcome);
  upsertSearchAttributes([
    { key: SettlementStatus, value: 'broadcast' },
    { key: TxHash, value: sent.txHash },
  ]);
  setCurrentDetails(`broadcast: ${sent.txHash}`);
  const outcome = await steps.confirmSettlement(input.key, input.inclusionTimeoutMs);
  await watchIfPending(input, outcome);
  return finish(outcome);
}

export async function SettlementWorkflow(input: SettlementInput): Promise<SettlementOutcome> {
  if (patched('settlement-steps')) return settleStepByStep(input);
  if (patched('settlement-one-activity')) {
    const outcome = await oneStep(input.inclusionTimeoutMs).settle(input.key, input.inclusionTimeoutMs);
    await watchIfPending(input, outcome);
    return finish(outcome);
  }
  let prepared;
  try {
    prepared = await beforeSigning.prepareSettlement(input.key);
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    // Verification, reservation or signing could not complete in time (database or RPC outage):
    // nothing was sent, so the answer is a plain failure.
    return finish({ status: 'failed', payer: '', transaction: null, cause: 'unavailable' });
  }
  switch (prepared.step) {
    case 'final':
      return finish(prepared.outcome);
    case 'rejected':
      return finish({ status: 'failed', payer: prepared.payer, transaction: null, cause: prepared.cause });
    case 'refused':
      return finish({ status: 'rejected', payer: prepared.payer, transaction: null, cause: prepared.guardrail });
  }

  upsertSearchAttributes([
    { key: SettlementStatus, value: 'broadcast' },
    { key: TxHash, value: prepared.txHash },
  ]);
  const outcome = await afterSigning(input.inclusionTimeoutMs).deliverSettlement(input.key, input.inclusionTimeoutMs);
  await watchIfPending(input, outcome);
  return finish(outcome);
}

export async function SettlementWatchWorkflow(input: { key: string }): Promise<SettlementOutcome> {
  upsertSearchAttributes([{ key: SettlementStatus, value: 'pending' }]);
  return finish(await watcher.watchSettlement(input.key));
}
