// A tenant's claim round over its batch-settlement channels (docs/SETTLEMENT.md, "Channels:
// claims and settles"): the channels with unclaimed charges, claimed in batches of up to 100,
// each batch one claimWithSignature through the tenant's facilitator (a batch the facilitator
// refuses: in parts, within the claim activity), then what the claims credited each receiver
// swept to it with `settle`. Started by the API processes' claims round (temporal/claims-due.ts)
// under the workflow id `claims-<tenant>`, so two rounds of a tenant never claim at once. The
// history names every channel and amount claimed (the activities' inputs and answers), never a
// signature: the activities load those by channel id.
import {
  ActivityFailure,
  continueAsNew,
  proxyActivities,
  setCurrentDetails,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { ChannelClaimActivities, ClaimOutcome, SweepOutcome } from '../activities/channel-claims.ts';

const { planChannelClaims } = proxyActivities<ChannelClaimActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

// The facilitator awaits the transaction's inclusion within one request; an answer not known is
// asked again, with backoff, for an hour (a payer's withdrawal takes 15 minutes at least, and the
// next round tries again).
const CLAIM_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '10 seconds',
  scheduleToCloseTimeout: '1 hour',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
};
const { claimChannels, settleReceiver } = proxyActivities<ChannelClaimActivities>(CLAIM_OPTIONS);

export type ChannelClaimInput = {
  tenantId: string;
  /** Why the round started: its period, the unclaimed threshold, or a payer's pending withdrawal. */
  reason: string;
};

export type ChannelClaimResult = {
  claims: Array<ClaimOutcome | { state: 'unavailable'; channels: number }>;
  settles: Array<SweepOutcome | { state: 'unavailable'; receiver: string }>;
};

const short = (id: string) => `${id.slice(0, 10)}…`;

/**
 * What the round's claims did, for its details: channels claimed, claim transactions (several for
 * a batch the facilitator refused, claimed in parts), channels set aside. A claim answered before
 * answers listed their transactions and set-aside channels (a history replayed) counts its one
 * transaction, or none, and nothing set aside.
 */
function tally(claims: ChannelClaimResult['claims']) {
  let channels = 0;
  let transactions = 0;
  let setAside = 0;
  for (const c of claims) {
    if (!('claimed' in c)) continue;
    const answer: Partial<ClaimOutcome> = c;
    channels += c.claimed.length;
    transactions += answer.transactions?.length ?? (c.transaction ? 1 : 0);
    setAside += answer.quarantined?.length ?? 0;
  }
  return { channels, transactions, setAside };
}

export async function ChannelClaimWorkflow(input: ChannelClaimInput): Promise<ChannelClaimResult> {
  const plan = await planChannelClaims(input.tenantId);
  const result: ChannelClaimResult = { claims: [], settles: [] };
  const receivers = new Map<string, { receiver: string; token: string }>();
  for (const [i, batch] of plan.batches.entries()) {
    setCurrentDetails(`claiming batch ${i + 1} of ${plan.batches.length}: ${batch.length} channels`);
    const total = batch.reduce((sum, c) => sum + BigInt(c.unclaimed), 0n);
    const named = batch
      .slice(0, 3)
      .map((c) => `${short(c.channel)}→${c.totalClaimed}`)
      .join(', ');
    try {
      const outcome = await claimChannels.executeWithOptions(
        {
          ...CLAIM_OPTIONS,
          // The Web UI's line for the activity: how many channels, how much, the first of them.
          summary: `claim ${batch.length} channels, ${total} unclaimed: ${named}${batch.length > 3 ? ', …' : ''}`,
        },
        [{ tenantId: input.tenantId, channels: batch }],
      );
      result.claims.push(outcome);
      for (const r of outcome.receivers) receivers.set(`${r.receiver}:${r.token}`, r);
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      // Not known within the hour: the rows stay unclaimed, and the next round claims them.
      result.claims.push({ state: 'unavailable', channels: batch.length });
    }
  }
  for (const { receiver, token } of receivers.values()) {
    setCurrentDetails(`settling ${receiver}`);
    try {
      result.settles.push(await settleReceiver({ tenantId: input.tenantId, receiver, token }));
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      result.settles.push({ state: 'unavailable', receiver });
    }
  }
  const { channels, transactions, setAside } = tally(result.claims);
  setCurrentDetails(
    `claimed ${channels} channels in ${transactions} transactions${setAside ? `, ${setAside} set aside` : ''}, settled ${result.settles.filter((s) => s.state === 'settled').length} receivers`,
  );
  // More channels than one round claims: the next round right away, on a fresh history.
  const progressed = result.claims.some((c) => c.state === 'claimed');
  if (plan.more && progressed) return continueAsNew<typeof ChannelClaimWorkflow>(input);
  return result;
}
