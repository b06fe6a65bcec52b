// The gate cannot take payment for a call now: the challenge entry of its scheme needs what could
// not be read (the tenant facilitator's address for `upto`, from its /supported). Nothing was
// verified or collected; the door answers as for a payment still settling (503, Retry-After), and
// a retry may find the facilitator readable. Apart from refusals.ts, which the registry of schemes
// (which throws it) cannot import without a cycle through the dialects.
export class PaymentUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PaymentUnavailable';
  }
}
