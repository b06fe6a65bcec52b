import { Migration } from '@mikro-orm/migrations';

// Claims of batch-settlement channels (gateway/payment/channel-claims/):
// - settlement_configs.claim_round_at: when the tenant's last claim round was started, so a
//   round starts at most every claim_every_seconds (sooner only for a threshold passed or a
//   payer's timed withdrawal), whichever API process notices it;
// - channels_chain_watch: the chain watch reads the channels with unclaimed charges whose
//   on-chain mirror is oldest first.
export class Migration20261206170000_channel_claim_rounds extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table settlement_configs add column claim_round_at timestamptz null`);
    this.addSql(
      `create index channels_chain_watch on channels (onchain_synced_at nulls first) where charged_cumulative > total_claimed`,
    );
  }

  override down(): void {
    this.addSql(`drop index if exists channels_chain_watch`);
    this.addSql(`alter table settlement_configs drop column if exists claim_round_at`);
  }
}
