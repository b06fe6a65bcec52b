// The metered charge's activities, thin over the domain's settler (gateway/payment/charges.ts):
// its reasons to try again become retryable failures whose types the histories show.
import { Context } from '@temporalio/activity';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import {
  ChargeNotDue,
  ChargeNotSettledYet,
  createChargeSettler,
  type ChargeDeps,
  type ChargeOutcome,
} from '../gateway/payment/charges.ts';

export type { ChargeOutcome };

const HEARTBEAT_EVERY_MS = 3_000;

export interface ChargeActivities {
  /** Settles a completed metered call's charge once; answers where it stands. */
  settleMeteredCharge(invocationId: string): Promise<ChargeOutcome>;
  /** Records a charge whose outcome stayed unknown past every retry as failed. */
  abandonMeteredCharge(invocationId: string): Promise<ChargeOutcome>;
}

function asFailure(err: unknown): unknown {
  if (err instanceof ChargeNotDue)
    return ApplicationFailure.create({
      message: err.message,
      type: 'ChargeNotDue',
      category: ApplicationFailureCategory.BENIGN,
    });
  // The facilitator did not answer in time or is busy with the same authorization: asked again
  // with the same request, it dedupes by the Permit2 nonce.
  if (err instanceof ChargeNotSettledYet)
    return ApplicationFailure.create({
      message: `${err.message} (${err.reason})`,
      type: 'ChargeNotSettledYet',
      category: ApplicationFailureCategory.BENIGN,
    });
  return err;
}

export function createChargeActivities(deps: ChargeDeps): ChargeActivities {
  const settler = createChargeSettler(deps);
  return {
    async settleMeteredCharge(invocationId) {
      // The facilitator may take SETTLEMENT_TIMEOUT_MS to answer (it awaits the transfer's
      // inclusion): the attempt heartbeats meanwhile, so a worker that dies mid-settle has its
      // attempt retried elsewhere within the heartbeat timeout, not after startToClose.
      const heartbeat = setInterval(() => Context.current().heartbeat(), HEARTBEAT_EVERY_MS);
      try {
        return await settler.settle(invocationId);
      } catch (err) {
        throw asFailure(err);
      } finally {
        clearInterval(heartbeat);
      }
    },
    abandonMeteredCharge: (invocationId) => settler.abandon(invocationId, 'settlement_unavailable'),
  };
}
