// The channel claims' activities, thin over the domain (gateway/payment/channel-claims/claims.ts):
// its reason to try again becomes a retryable failure whose type the history shows.
import { Context } from '@temporalio/activity';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import {
  ClaimNotSettledYet,
  createChannelClaims,
  type ChannelClaimDeps,
  type ClaimOutcome,
  type ClaimPlan,
  type PlannedClaim,
  type SweepOutcome,
} from '../gateway/payment/channel-claims/claims.ts';

export type { ClaimOutcome, ClaimPlan, PlannedClaim, SweepOutcome };

const HEARTBEAT_EVERY_MS = 3_000;
// Time kept at the end of an attempt to record what its claims did.
const DEADLINE_MARGIN_MS = 5_000;

export interface ChannelClaimActivities {
  /** The tenant's unclaimed channels, in the batches a round claims. */
  planChannelClaims(tenantId: string): Promise<ClaimPlan>;
  /**
   * One batch in one claim transaction (or none, when the chain holds it already); a batch the
   * facilitator refuses, in parts, within the attempt's time.
   */
  claimChannels(input: { tenantId: string; channels: PlannedClaim[] }): Promise<ClaimOutcome>;
  /** What the claims credited (receiver, token), sent to the receiver. */
  settleReceiver(input: { tenantId: string; receiver: string; token: string }): Promise<SweepOutcome>;
}

function asFailure(err: unknown): unknown {
  // The facilitator did not answer in time or could not be read: asked again with the same
  // rows, it answers the same settlement (or the chain holds them and nothing is sent).
  if (err instanceof ClaimNotSettledYet)
    return ApplicationFailure.create({
      message: `${err.message} (${err.reason})`,
      type: 'ClaimNotSettledYet',
      category: ApplicationFailureCategory.BENIGN,
    });
  return err;
}

/** Runs `work` heartbeating meanwhile: a worker that dies mid-claim has its attempt retried within the heartbeat timeout. */
async function heartbeating<T>(work: () => Promise<T>): Promise<T> {
  const heartbeat = setInterval(() => Context.current().heartbeat(), HEARTBEAT_EVERY_MS);
  try {
    return await work();
  } catch (err) {
    throw asFailure(err);
  } finally {
    clearInterval(heartbeat);
  }
}

/**
 * When this attempt times out (its start-to-close timeout from now, a little early): the parts of
 * a refused batch that could not be answered before it are left to the next round.
 */
function attemptDeadline(): number {
  return Date.now() + Context.current().info.startToCloseTimeoutMs - DEADLINE_MARGIN_MS;
}

export function createChannelClaimActivities(deps: ChannelClaimDeps): ChannelClaimActivities {
  const claims = createChannelClaims(deps);
  return {
    planChannelClaims: (tenantId) => claims.plan(tenantId),
    claimChannels: ({ tenantId, channels }) =>
      heartbeating(() => claims.claim(tenantId, channels, { deadline: attemptDeadline() })),
    settleReceiver: ({ tenantId, receiver, token }) => heartbeating(() => claims.sweep(tenantId, receiver, token)),
  };
}
