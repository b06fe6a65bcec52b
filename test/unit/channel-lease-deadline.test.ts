// A batch-settlement deposit or refund is sent under its call's channel lease: its facilitator
// call must be answered while the lease still holds, with time left for what follows it.
import assert from 'node:assert/strict';
import { LEASE_SECONDS, settleDeadlineUnderLease } from '../../gateway/payment/channels/store.ts';

const LEASE_MS = LEASE_SECONDS * 1000;

describe('channels: a facilitator call under a call lease', () => {
  it('takes the configured deadline while the lease leaves room for it', () => {
    assert.equal(settleDeadlineUnderLease(1_000, 1_050, 30_000), 30_000);
  });
  it('is shortened to end 20 s before the lease could lapse, whatever the configured deadline', () => {
    const leasedAt = 1_000;
    for (const [elapsed, configured] of [
      [0, 600_000],
      [60_000, 90_000],
      [95_000, 30_000],
    ]) {
      const deadline = settleDeadlineUnderLease(leasedAt, leasedAt + elapsed, configured)!;
      assert.equal(deadline, Math.min(configured, LEASE_MS - 20_000 - elapsed));
      assert.ok(elapsed + deadline <= LEASE_MS - 20_000);
    }
  });
  it('sends nothing once less than 2 s of that is left', () => {
    assert.equal(settleDeadlineUnderLease(0, LEASE_MS - 20_000 - 1_999, 30_000), null);
    assert.equal(settleDeadlineUnderLease(0, LEASE_MS - 20_000 - 2_000, 30_000), 2_000);
    assert.equal(settleDeadlineUnderLease(0, LEASE_MS, 30_000), null);
  });
});
