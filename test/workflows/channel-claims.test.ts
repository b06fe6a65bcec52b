// ChannelClaimWorkflow's own logic on Temporal's time-skipping test server
// (test/workflows/environment.ts): its activities are test doubles standing in for the plan, the
// claim and the settle against PostgreSQL, the facilitator and the chain (those are
// test/settlement/channel-claims.test.ts's), so each test can have a batch claimed, or not known
// past every retry, and see what the round then does: the other batches go on, only the
// receivers their claims credited are settled, and a plan with more channels than a round
// continues as new, only while it makes progress.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import type { ChannelClaimActivities, ClaimOutcome, ClaimPlan, PlannedClaim } from '../../activities/channel-claims.ts';
import type { ChannelClaimResult } from '../../workflows/channel-claims.ts';
import { startChannelClaims } from '../../temporal/claim-start.ts';
import { TenantId } from '../../temporal/search-attributes.ts';
import { searchAttributesOf, workflowHarness, type WorkflowHarness } from './environment.ts';

const TOKEN = '0x5FbDB2315678afecb367f032d93F642f64180aa3';
const receiver = (n: number) => `0x${String(n).padStart(40, '0')}`;
const planned = (n: number, to = 1): PlannedClaim => ({
  channel: `0x${String(n).padStart(64, '0')}`,
  receiver: receiver(to),
  totalClaimed: '1000',
  unclaimed: '1000',
});
const claimed = (batch: PlannedClaim[], transaction = `0x${'ab'.repeat(32)}`): ClaimOutcome => ({
  state: 'claimed',
  transaction,
  transactions: [transaction],
  requests: 1,
  claimed: batch.map((c) => ({ channel: c.channel, totalClaimed: c.totalClaimed })),
  skipped: [],
  quarantined: [],
  receivers: [...new Set(batch.map((c) => c.receiver))].map((r) => ({ receiver: r, token: TOKEN })),
});

describe('ChannelClaimWorkflow', function () {
  this.timeout(60_000);
  let harness: WorkflowHarness;
  before(async () => {
    harness = await workflowHarness('gateway');
  });
  after(async () => harness?.teardown());

  /** The activities as doubles: `plans` answered in turn, each batch claimed by `claim`; every call recorded. */
  function doubles(plans: ClaimPlan[], claim: (batch: PlannedClaim[]) => ClaimOutcome | Promise<ClaimOutcome>) {
    const calls: Array<{ activity: string; input: unknown }> = [];
    let plan = 0;
    const activities: ChannelClaimActivities = {
      async planChannelClaims(tenantId) {
        calls.push({ activity: 'planChannelClaims', input: tenantId });
        return plans[Math.min(plan++, plans.length - 1)]!;
      },
      async claimChannels(input) {
        calls.push({ activity: 'claimChannels', input });
        return claim(input.channels);
      },
      async settleReceiver(input) {
        calls.push({ activity: 'settleReceiver', input });
        return { receiver: input.receiver, token: input.token, amount: '1000', transaction: null, state: 'settled' };
      },
    };
    return { calls, activities };
  }

  it('a batch not known past its retries leaves the others claimed, and only their receivers are settled', async () => {
    const first = [planned(1, 1), planned(2, 2)];
    const second = [planned(3, 3)];
    const { calls, activities } = doubles([{ batches: [first, second], more: false }], (batch) => {
      if (batch[0]!.channel === second[0]!.channel)
        throw ApplicationFailure.create({ message: 'no answer', type: 'ClaimNotSettledYet', nonRetryable: true });
      return claimed(batch);
    });
    const tenantId = `tenant-${randomUUID()}`;
    const result = await harness.withWorker(activities, async (taskQueue) => {
      const handle = await startChannelClaims(harness.env.client, taskQueue, { tenantId, reason: 'threshold' }, 10_000);
      const answer = (await handle.result()) as ChannelClaimResult;
      assert.deepEqual(await searchAttributesOf(harness.env, handle.workflowId), { [TenantId.name]: tenantId });
      return answer;
    });
    assert.deepEqual(
      result.claims.map((c) => c.state),
      ['claimed', 'unavailable'],
    );
    assert.deepEqual(
      calls.filter((c) => c.activity === 'settleReceiver').map((c) => (c.input as { receiver: string }).receiver),
      [receiver(1), receiver(2)],
    );
  });

  it('more channels than a round: continues as new while it claims, and stops when nothing was claimed', async () => {
    const batch = [planned(1)];
    const progressing = doubles(
      [
        { batches: [batch], more: true },
        { batches: [batch], more: false },
      ],
      (b) => claimed(b),
    );
    await harness.withWorker(progressing.activities, async (taskQueue) => {
      const handle = await startChannelClaims(
        harness.env.client,
        taskQueue,
        { tenantId: `tenant-${randomUUID()}`, reason: 'period' },
        10_000,
      );
      await handle.result();
    });
    assert.equal(progressing.calls.filter((c) => c.activity === 'planChannelClaims').length, 2);

    // Every batch refused: the round ends, however many channels wait.
    const stuck = doubles([{ batches: [batch], more: true }], (b) => ({
      ...claimed(b),
      state: 'refused',
      transaction: null,
      transactions: [],
      claimed: [],
      receivers: [],
      skipped: b.map((c) => ({ channel: c.channel, cause: 'claim_refused' })),
    }));
    const result = await harness.withWorker(stuck.activities, async (taskQueue) => {
      const handle = await startChannelClaims(
        harness.env.client,
        taskQueue,
        { tenantId: `tenant-${randomUUID()}`, reason: 'period' },
        10_000,
      );
      return (await handle.result()) as ChannelClaimResult;
    });
    assert.equal(stuck.calls.filter((c) => c.activity === 'planChannelClaims').length, 1);
    assert.deepEqual(result.settles, []);
  });
});
