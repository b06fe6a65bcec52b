// The settlement activities' interface, shared with SettlementWorkflow (its types, and the one
// timing value both sides use, which puts this file in the workflow bundle). The step
// results are the facilitator's (facilitator/settlement/types.ts); what they hold may enter a
// workflow history: addresses, amounts, hashes and causes, never signed bytes.
import type { Broadcast, Prepared, Reserved, SettlementOutcome, Verified } from '../../facilitator/settlement/types.ts';

export type { Prepared, SettlementOutcome };

/**
 * What a step after signing (broadcast, confirm) may run beyond the inclusion timeout: its
 * activity's timeout in SettlementWorkflow, and, with the sweep's delay, how long a live run can
 * leave a signed record untouched (the outbox sweeper's bound: facilitator-service/sweeper.ts).
 */
export const AFTER_SIGNING_MARGIN_MS = 30_000;

/**
 * One activity per step of a settlement (SettlementWorkflow since the `settlement-steps`
 * patch), in order: 1 verify, 2 reserve (the activity `claimSettlement`, its name in recorded
 * histories), 3 broadcast, 4 confirm. Verify and reserve give up with
 * `unavailable` after five minutes of failures, and only while no signed bytes exist (giving up
 * is then safe); broadcast and confirm retry without limit. `watchSettlement` keeps watching
 * after a confirm left the settlement pending.
 * Kept for runs started before that patch: `settle` (every step in one activity, since the
 * `settlement-one-activity` patch) and, before it, `prepareSettlement` and `deliverSettlement`.
 */
export interface SettlementActivities {
  verifySettlement(key: string): Promise<Verified>;
  claimSettlement(key: string): Promise<Reserved>;
  broadcastSettlement(key: string): Promise<Broadcast>;
  confirmSettlement(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
  watchSettlement(key: string): Promise<SettlementOutcome>;
  settle(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
  prepareSettlement(key: string): Promise<Prepared>;
  deliverSettlement(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
}
