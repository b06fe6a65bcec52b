// The channel claims round (docs/SETTLEMENT.md, "Channels: claims and settles"): every
// CHECK_EVERY_MS each API process mirrors the chain for a batch of channels with unclaimed
// charges (a payer's timed withdrawal is noticed there), then leases the tenants whose claim
// round is due (their period, their unclaimed threshold, a pending withdrawal:
// gateway/payment/channel-claims/due.ts) and starts each one's ChannelClaimWorkflow
// (claim-start.ts). A start that fails leaves the tenant for its next period, or, when urgent,
// for the next round after the urgent gap.
import type { Client } from '@temporalio/client';
import type { Logger } from '../lib/log.ts';
import { errorKind } from '../lib/error-kind.ts';
import { runRounds } from '../lib/rounds.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import type { ChainRpc } from '../gateway/payment/channel-claims/chain.ts';
import { leaseDueClaimRounds, watchUnclaimedChannels } from '../gateway/payment/channel-claims/due.ts';
import { temporalKnownDown } from './client.ts';
import { startChannelClaims } from './claim-start.ts';

const CHECK_EVERY_MS = 10_000;
/** A round sooner than the period (threshold, withdrawal) is not started again within this. */
const URGENT_GAP_MS = 30_000;
/** An unclaimed channel's mirror of the chain is read again once this old (withdrawals take 15 minutes at least). */
const STALE_MS = 60_000;
const WATCH_BATCH = 200;
const BATCH = 100;
const START_DEADLINE_MS = 2_000;

export function startDueClaims(deps: {
  orm: GatewayDb;
  temporal: Client;
  taskQueue: string;
  rpc: ChainRpc;
  log: Logger;
  everyMs?: number;
  urgentGapMs?: number;
  staleMs?: number;
}): { runOnce(): Promise<number>; stop(): Promise<void> } {
  const { everyMs = CHECK_EVERY_MS, urgentGapMs = URGENT_GAP_MS, staleMs = STALE_MS } = deps;
  let stopped = false;

  async function runOnce(): Promise<number> {
    // The chain first: a withdrawal noticed now makes its tenant's round due in this same pass.
    try {
      const watched = await watchUnclaimedChannels(deps.orm, deps.rpc, { staleMs, batch: WATCH_BATCH });
      if (watched.withdrawing) deps.log.info(watched, 'channels with a pending withdrawal and unclaimed charges');
    } catch (err) {
      deps.log.warn({ err: errorKind(err) }, 'channel chain watch failed');
    }
    if (temporalKnownDown(deps.temporal)) return 0;
    const due = await leaseDueClaimRounds(deps.orm, { urgentGapMs, batch: BATCH });
    let started = 0;
    for (const round of due) {
      if (stopped) break;
      try {
        await startChannelClaims(deps.temporal, deps.taskQueue, round, START_DEADLINE_MS);
        started++;
      } catch (err) {
        deps.log.warn({ tenantId: round.tenantId, err: errorKind(err) }, 'could not start a claim round');
      }
    }
    return started;
  }

  const rounds = runRounds(everyMs, runOnce, (err) => deps.log.warn({ err: errorKind(err) }, 'claims round failed'));
  return {
    runOnce,
    async stop() {
      stopped = true;
      await rounds.stop();
    },
  };
}
