// What the payment flow (flow.ts) says when it does not accept a payment. The domain's words;
// the door (api/payment/stage.ts) answers each as the x402 contract says: 402 with the challenge,
// 503 with Retry-After, 409, or the first attempt's 202. (A challenge that cannot be built now is
// unavailable.ts's, which the registry of schemes throws.)
import type { ChallengeEntry } from '../../x402/schemas.ts';
import type { Dialect } from './dialect.ts';

/** A priced call offering no payment: it is told what to pay (`entries`, one per scheme). */
export class PaymentRequired extends Error {
  readonly entries: ChallengeEntry[];
  constructor(entries: ChallengeEntry[]) {
    super('payment required');
    this.entries = entries;
    this.name = 'PaymentRequired';
  }
}

/**
 * A payment refused before anything was collected. `reason` is the coarse word the payer is
 * told (`invalid payment`, `payment already used`, or the settlement's `settlement_*`); the
 * precise cause is only logged. A `corrective` refusal asks the payer to pay again, its entries
 * carrying the state it lacked (batch-settlement's corrective 402, whose reason is the spec's
 * code): a transport that answers other refusals as failures asks for the payment instead.
 */
export class PaymentRefused extends Error {
  readonly reason: string;
  readonly entries: ChallengeEntry[];
  readonly corrective: boolean;
  constructor(reason: string, entries: ChallengeEntry[], corrective = false) {
    super(reason);
    this.reason = reason;
    this.entries = entries;
    this.corrective = corrective;
    this.name = 'PaymentRefused';
  }
}

/**
 * Not known yet whether the transfer lands (no answer in time, the facilitator busy with it):
 * the payer is told to resend the same payment, never to sign another (docs/SETTLEMENT.md, the
 * payer's promise).
 */
export class PaymentStillSettling extends Error {
  constructor() {
    super('payment is still settling; retry with the same payment header');
    this.name = 'PaymentStillSettling';
  }
}

/** The payment identifier already names another authorization of this payer at this agent. */
export class PaymentIdentifierConflict extends Error {
  constructor() {
    super('payment identifier already used with another payment');
    this.name = 'PaymentIdentifierConflict';
  }
}

/**
 * A resend under a payment identifier whose payment already bought a call: that call's answer
 * again (its invocation and, when it settled, its receipt in the dialect of this resend).
 */
export class PaymentAlreadyAnswered extends Error {
  readonly invocationId: string;
  readonly receipt: { dialect: Dialect; value: string } | null;
  constructor(invocationId: string, receipt: { dialect: Dialect; value: string } | null) {
    super('payment identifier already answered');
    this.invocationId = invocationId;
    this.receipt = receipt;
    this.name = 'PaymentAlreadyAnswered';
  }
}
