// One x402 payment the gateway has accepted, its payment binding: recorded by (network, asset,
// payer, nonce) before it is settled, then bound to the one invocation it buys (table
// payment_claims, migration Migration20261122120000_payment_claims; the stored status
// 'claimed' means recorded, outcome not known yet). A payment settled before its call never has
// its signature stored here; one charged after its call keeps it until its charge is settled
// (signed_payment).
import { defineEntity, p } from '@mikro-orm/core';
import type { ChallengeEntry, OfferedPayment } from '../../x402/schemas.ts';

/** A payment charged after its call, as kept for its charge: the payment and the entry it paid. */
export type SignedPayment = {
  payment: OfferedPayment;
  requirements: ChallengeEntry;
  /** batch-settlement: the hold the call has on its channel until its charge is committed (channels/store.ts). */
  channelLease?: string;
  /** batch-settlement: the refund nonce a cooperative refund was sent with (channels/refunds.ts). */
  refundNonce?: string;
};

/**
 * What a batch-settlement call's binding keeps of its payment until its charge is committed: the
 * voucher the charge is committed under, where the payment holds it, and the call's hold on its
 * channel. Not the whole payment: it is written with every voucher-paid call, and the rest of it
 * (the channel's config, the terms) is the channel's row's (a third of the row's write, measured).
 */
export type KeptVoucher = {
  payment: { payload: { voucher: { channelId: string; maxClaimableAmount: string; signature: string } } };
  channelLease: string;
};

/** What a binding keeps of a payment charged after its call. */
export type KeptPayment = SignedPayment | KeptVoucher;

/**
 * Where a metered call's charge stands: `settling` once frozen and sent to the facilitator, then
 * settled, failed or unconfigured (null on the row while it is due).
 */
export type ChargeSettlementState = 'settling' | 'settled' | 'failed' | 'unconfigured';

export type PaymentBindingStatus = 'claimed' | 'settled' | 'unsettled';

export const PaymentBindingSchema = defineEntity({
  name: 'PaymentBinding',
  tableName: 'payment_claims',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    agentId: p.string(),
    network: p.string(),
    asset: p.string(),
    payer: p.string(),
    nonce: p.string(),
    amount: p.string(),
    status: p.string().$type<PaymentBindingStatus>(),
    transaction: p.string().nullable(),
    invocationId: p.string().nullable(),
    /** The payer's payment identifier (x402 payment-identifier extension), when it sent one. */
    paymentId: p.string().nullable(),
    /**
     * A payment charged after its call (`upto`): the signed payment and the terms it was
     * verified against, kept until the charge is settled (charges.ts), then cleared.
     */
    signedPayment: p.json<KeptPayment>().nullable().default(null),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
