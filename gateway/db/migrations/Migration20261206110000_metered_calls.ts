import { Migration } from '@mikro-orm/migrations';

// A metered (x402 `upto`) call's record: the scheme and the maximum the payer signed, written
// when the call is admitted; what the meter read and the charge it comes to, written when the
// call completes (gateway/invocations/metered.ts). All null on every other call.
export class Migration20261206110000_metered_calls extends Migration {
  override up(): void {
    this.addSql(`alter table invocations
      add column payment_scheme text null,
      add column payment_max_amount text null,
      add column payment_charge text null,
      add column meter_reading jsonb null`);
  }

  override down(): void {
    this.addSql(`alter table invocations
      drop column if exists payment_scheme,
      drop column if exists payment_max_amount,
      drop column if exists payment_charge,
      drop column if exists meter_reading`);
  }
}
