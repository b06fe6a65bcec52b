// Which failed-gas budget a settlement draws on (docs/SETTLEMENT.md, "Failed-gas budget"): the
// account's own only for what no payer can make revert once simulated.
import assert from 'node:assert/strict';
import { drawsOwnGasBudget, type SettlementRequest } from '../../facilitator/settlement/request.ts';

const ADDRESS = '0x1111111111111111111111111111111111111111';
const ZERO = '0x0000000000000000000000000000000000000000';
const channel = (payerAuthorizer: string) => ({
  payer: ADDRESS,
  payerAuthorizer,
  receiver: ADDRESS,
  receiverAuthorizer: ADDRESS,
  token: ADDRESS,
  withdrawDelay: 900,
  salt: `0x${'00'.repeat(32)}`,
});
const row = (payerAuthorizer: string) => ({
  voucher: { channel: channel(payerAuthorizer), maxClaimableAmount: '1000' },
  signature: `0x${'11'.repeat(65)}`,
  totalClaimed: '1000',
});
const batch = (action: unknown) =>
  ({
    scheme: 'batch-settlement',
    network: 'eip155:8453',
    asset: ADDRESS,
    payTo: ADDRESS,
    amount: '0',
    action,
  }) as SettlementRequest;

describe('facilitator: the failed-gas budget a settlement draws on', () => {
  it('a settle, and a claim whose every voucher a payer authorizer signs, draw on the account’s own', () => {
    assert.equal(drawsOwnGasBudget(batch({ type: 'settle', receiver: ADDRESS, token: ADDRESS })), true);
    assert.equal(drawsOwnGasBudget(batch({ type: 'claim', claims: [row(ADDRESS), row(ADDRESS)] })), true);
  });
  it('a claim with one voucher the payer itself signs (a contract wallet may answer otherwise when mined) draws on the payers’', () => {
    assert.equal(drawsOwnGasBudget(batch({ type: 'claim', claims: [row(ADDRESS), row(ZERO)] })), false);
  });
  it('what a payer signs draws on the payers’: a deposit, a refund, an exact transfer', () => {
    assert.equal(drawsOwnGasBudget(batch({ type: 'deposit', channelConfig: channel(ADDRESS) })), false);
    assert.equal(drawsOwnGasBudget(batch({ type: 'refund', channelConfig: channel(ADDRESS) })), false);
    const exact = { paymentPayload: { payload: { authorization: { from: ADDRESS } } } } as unknown as SettlementRequest;
    assert.equal(drawsOwnGasBudget(exact), false);
  });
});
