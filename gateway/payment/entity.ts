// One x402 payment the gateway has accepted, its payment binding: recorded by (network, asset,
// payer, nonce) before it is settled, then bound to the one invocation it buys (table
// payment_claims, migration Migration20261122120000_payment_claims; the stored status
// 'claimed' means recorded, outcome not known yet). The signature itself is never stored here.
import { defineEntity, p } from '@mikro-orm/core';

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
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
