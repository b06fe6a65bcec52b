import { Migration } from '@mikro-orm/migrations';

// Settling a metered (x402 `upto`) call's charge after its answer (gateway/payment/charges.ts):
// - payment_claims.signed_payment: the payer's signed authorization and the terms it was
//   verified against, kept from the call's admission until its charge is settled (then
//   cleared); null for every payment settled before its call;
// - invocations.payment_settlement: where the charge stands (settling, settled, failed,
//   unconfigured; null while it is due or on a call that is not metered), and why a failed one
//   failed;
// - invocations.charge_lease_until: the due-charges round's lease (temporal/charges-due.ts);
// - the index over the metered rows whose charge is still due or being settled, which that
//   round reads, is built without blocking the table's writes by
//   Migration20261206180000_concurrent_indexes (invocations_charges_due_tenant; this one created
//   invocations_charges_due before, which that one drops; its down still drops it).
// The lock timeout keeps a busy invocations table from queueing every call behind this change.
export class Migration20261206130000_metered_settlement extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table payment_claims add column signed_payment jsonb null`);
    this.addSql(`alter table invocations
      add column payment_settlement text null,
      add column payment_settle_error text null,
      add column charge_lease_until timestamptz null`);
  }

  override down(): void {
    this.addSql(`drop index if exists invocations_charges_due`);
    this.addSql(`alter table invocations
      drop column if exists payment_settlement,
      drop column if exists payment_settle_error,
      drop column if exists charge_lease_until`);
    this.addSql(`alter table payment_claims drop column if exists signed_payment`);
  }
}
