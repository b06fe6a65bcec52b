import { Migration } from '@mikro-orm/migrations';

// Claims of batch-settlement channels (gateway/payment/channel-claims/):
// - channels.claim_quarantined_at: when the claims set the channel aside because its latest
//   voucher cannot be claimed (not the payer's signature, another token, a claim the facilitator
//   refused for it alone). A set-aside channel is neither planned nor makes its tenant's round
//   due, until a newer voucher is committed on it (last_request_at after the quarantine).
export class Migration20261206183000_channel_claim_quarantine extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table channels add column claim_quarantined_at timestamptz null`);
  }

  override down(): void {
    this.addSql(`alter table channels drop column if exists claim_quarantined_at`);
  }
}
