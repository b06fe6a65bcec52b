// The settlement activities, created from their dependencies (pool, chain provider, gas
// wallet signer, configuration); the facilitator worker registers what this returns.
import { createVerifyActivity } from './verify.ts';
import { createClaimActivities } from './claim.ts';
import { createSendActivities } from './send.ts';
import type { SettlementActivities, SettlementDeps } from './types.ts';

export function createSettlementActivities(deps: SettlementDeps): SettlementActivities {
  return {
    verifySettlement: createVerifyActivity(deps),
    ...createClaimActivities(deps),
    ...createSendActivities(deps),
  };
}

export type { SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';
