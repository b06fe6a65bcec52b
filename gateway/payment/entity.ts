// One x402 payment the gateway has accepted: claimed by (network, asset, payer, nonce) before
// it is settled, then bound to the one invocation it buys (migration
// Migration20261122120000_payment_claims). The signature itself is never stored here.
import { defineEntity, p } from '@mikro-orm/core';

export type PaymentClaimStatus = 'claimed' | 'settled' | 'unsettled';

export const PaymentClaimSchema = defineEntity({
  name: 'PaymentClaim',
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
    status: p.string().$type<PaymentClaimStatus>(),
    transaction: p.string().nullable(),
    invocationId: p.string().nullable(),
    /** The payer's payment identifier (x402 payment-identifier extension), when it sent one. */
    paymentId: p.string().nullable(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
