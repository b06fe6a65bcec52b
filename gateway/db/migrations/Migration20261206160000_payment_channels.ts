import { Migration } from '@mikro-orm/migrations';

// Payment channels of the x402 `batch-settlement` scheme, as the gateway (the server of the
// scheme's spec) keeps them (gateway/payment/channels/):
// - channels: one row per on-chain channel id, owned by the tenant whose call first saw it;
//   the channel's immutable config, what the gateway has charged on it (charged_cumulative),
//   the latest voucher the payer signed (signed_max_claimable, signature), the on-chain state it
//   mirrors (balance, total_claimed, withdraw_requested_at, refund_nonce, onchain_synced_at),
//   and the per-channel lease that serializes its calls across API replicas (busy_until,
//   busy_invocation): a call holds it from admission until its charge is committed;
// - invocations.payment_channel: the channel a batch-settlement call was paid from;
// - settlement_configs.claim_every_seconds / claim_threshold: how often the tenant's outstanding
//   vouchers are claimed on chain, and the unclaimed amount that claims them sooner.
// Amounts are numeric(78,0) (uint256 in base units).
export class Migration20261206160000_payment_channels extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`create table channels (
      id text primary key,
      tenant_id text not null,
      agent_id text null,
      payer text not null,
      receiver text not null,
      receiver_authorizer text not null,
      config jsonb not null,
      charged_cumulative numeric(78,0) not null default 0,
      signed_max_claimable numeric(78,0) not null default 0,
      signature text null,
      balance numeric(78,0) not null default 0,
      total_claimed numeric(78,0) not null default 0,
      withdraw_requested_at bigint not null default 0,
      refund_nonce numeric(78,0) not null default 0,
      onchain_synced_at timestamptz null,
      last_request_at timestamptz null,
      busy_until timestamptz null,
      busy_invocation text null,
      claimed_at timestamptz null,
      claim_error text null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    this.addSql(`create index channels_tenant on channels (tenant_id, id)`);
    // The claim round reads the channels whose charges are not all claimed yet.
    this.addSql(
      `create index channels_unclaimed on channels (tenant_id, receiver) where charged_cumulative > total_claimed`,
    );
    this.addSql(`alter table invocations add column payment_channel text null`);
    this.addSql(`alter table settlement_configs
      add column claim_every_seconds integer not null default 300,
      add column claim_threshold numeric(78,0) null`);
  }

  override down(): void {
    this.addSql(
      `alter table settlement_configs drop column if exists claim_every_seconds, drop column if exists claim_threshold`,
    );
    this.addSql(`alter table invocations drop column if exists payment_channel`);
    this.addSql(`drop table if exists channels`);
  }
}
