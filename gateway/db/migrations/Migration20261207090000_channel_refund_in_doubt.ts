import { Migration } from '@mikro-orm/migrations';

// channels.refund_in_doubt: a cooperative refund sent to the facilitator whose outcome is not
// known (written before it is sent, cleared once it is known): its refund nonce, the charged total
// it claims, the payload and terms to send it again with, and since when. The refund may still
// land, claiming what was charged then and returning the rest of the escrow: until it is known to
// have landed or failed, no payment on the channel is admitted without first asking for it
// (gateway/payment/channels/admission.ts), so no call is served that it would leave unclaimed. A
// nullable column without a default: adding it rewrites nothing.
export class Migration20261207090000_channel_refund_in_doubt extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table channels add column refund_in_doubt jsonb null`);
  }

  override down(): void {
    this.addSql(`alter table channels drop column if exists refund_in_doubt`);
  }
}
