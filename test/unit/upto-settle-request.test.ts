// The facilitator's pure upto parts: a /settle body in either envelope (x402 v2, or the v1-style
// one) becomes one request with the charge; the proxy call read from a stored payment is the one
// the verifier's result gives; an upto key never names an exact settlement; two requests of one
// authorization with different charges are different settlements; and what the record holds.
import assert from 'node:assert/strict';
import { Wallet } from 'ethers';
import { settlementKey, isUptoKey, uptoNonceOfKey, uptoSettlementKey } from '../../facilitator/store/records.ts';
import { sameSettlement, settlementKind, settlementTerms } from '../../facilitator/settlement/request.ts';
import { parseUptoSettleRequest, v2SettleKind } from '../../x402/schemes/upto/settle-request.ts';
import { uptoSettleCall, uptoSettleCallOf } from '../../x402/schemes/upto/settle-args.ts';
import { verifyUptoPayment } from '../../x402/schemes/upto/verify.ts';
import type { UptoPayment } from '../../x402/schemes/upto/schemas.ts';
import { signUptoPayment, UPTO_NETWORK, type UptoTerms } from '../support/upto.ts';

const payer = new Wallet('0x1111111111111111111111111111111111111111111111111111111111111111');
const payTo = new Wallet('0x2222222222222222222222222222222222222222222222222222222222222222').address;
const facilitator = new Wallet('0x3333333333333333333333333333333333333333333333333333333333333333').address;
const token = '0x5FbDB2315678afecb367f032d93F642f64180aa3';
const terms: UptoTerms = { asset: token, payTo, facilitator, amount: 5_000_000n };
/** A chain where the payer has no Permit2 allowance and permit nonce 7. */
const noAllowance = {
  readContract: async ({ functionName }: { functionName: string }) => (functionName === 'nonces' ? 7n : 0n),
};

const v2Body = (payment: UptoPayment, charge: string) => ({
  x402Version: 2,
  paymentPayload: payment,
  paymentRequirements: { scheme: 'upto', network: UPTO_NETWORK, amount: charge, asset: token, payTo },
});

const v1Body = (payment: UptoPayment, charge: string) => ({
  x402Version: 1,
  paymentPayload: {
    x402Version: 1,
    scheme: 'upto',
    network: 'base',
    payload: payment.payload,
    extensions: payment.extensions,
  },
  paymentRequirements: {
    scheme: 'upto',
    network: 'base',
    maxAmountRequired: charge,
    asset: token,
    payTo,
    resource: 'https://gateway.test/paid',
    maxTimeoutSeconds: 60,
  },
});

describe('the facilitator’s upto request (pure part)', function () {
  it('takes the x402 v2 envelope: the payment as the client sent it, the requirements’ amount as the charge', async () => {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const request = parseUptoSettleRequest(v2Body(payment, '1234'));
    assert.deepEqual(request, {
      scheme: 'upto',
      x402Version: 2,
      network: UPTO_NETWORK,
      payment,
      asset: token,
      payTo,
      charge: '1234',
    });
    assert.deepEqual(v2SettleKind(v2Body(payment, '1234')), {
      ...v2Body(payment, '1234').paymentRequirements,
    });
  });

  it('takes the v1-style envelope: maxAmountRequired is the charge, the permit rides in extensions, and the payment verifies as signed', async () => {
    const { payment } = await signUptoPayment(payer.privateKey, { ...terms, sponsoring: true }, noAllowance);
    const request = parseUptoSettleRequest(v1Body(payment, '0'))!;
    assert.equal(request.x402Version, 1);
    assert.equal(request.network, 'base');
    assert.equal(request.charge, '0');
    assert.deepEqual(request.payment.extensions, payment.extensions);
    assert.equal(request.payment.accepted.amount, '5000000', 'the signed maximum');
    assert.equal(v2SettleKind(v1Body(payment, '0')), null, 'no v2 body');
    const verified = await verifyUptoPayment(request.payment, {
      network: 'base',
      token: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: token },
      payTo,
      facilitator,
      maxAmount: 0n,
      now: Math.floor(Date.now() / 1000),
      marginSeconds: 30,
    });
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);
    // The call read from the stored payment is the one the verifier's result gives, permit and all.
    assert.deepEqual(uptoSettleCallOf(request.payment, 10n), uptoSettleCall(verified.payment, 10n));
    assert.equal(uptoSettleCallOf(request.payment, 10n).method, 'settleWithPermit');
  });

  it('refuses bodies that carry no upto payment', async () => {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    assert.equal(parseUptoSettleRequest({ x402Version: 2, paymentPayload: payment }), null);
    const noCharge = v2Body(payment, '1');
    delete (noCharge.paymentRequirements as Partial<typeof noCharge.paymentRequirements>).amount;
    assert.equal(parseUptoSettleRequest(noCharge), null);
    const exact = v1Body(payment, '1');
    exact.paymentPayload.scheme = 'exact';
    assert.equal(parseUptoSettleRequest(exact), null);
    assert.equal(parseUptoSettleRequest('upto'), null);
  });

  it('keys an upto authorization apart from any exact one, and reads its Permit2 nonce back', () => {
    const nonce = 0xabcn;
    const key = uptoSettlementKey(8453, token, payer.address, nonce);
    const hex = `0x${nonce.toString(16).padStart(64, '0')}`;
    assert.notEqual(key, settlementKey(8453, token, payer.address, hex));
    assert.equal(key, `settle:8453:${token.toLowerCase()}:${payer.address.toLowerCase()}:upto-${hex}`);
    assert.equal(isUptoKey(key), true);
    assert.equal(isUptoKey(settlementKey(8453, token, payer.address, hex)), false);
    assert.equal(uptoNonceOfKey(key), nonce);
  });

  it('one authorization with another charge is another settlement; the record holds the charge, and the deadline as validBefore', async () => {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const first = parseUptoSettleRequest(v2Body(payment, '1000'))!;
    assert.equal(sameSettlement(first, parseUptoSettleRequest(v2Body(payment, '1000'))!), true);
    assert.equal(sameSettlement(first, parseUptoSettleRequest(v2Body(payment, '999'))!), false);
    const deadline = BigInt(payment.payload.permit2Authorization.deadline);
    assert.deepEqual(settlementTerms(first), {
      payer: payer.address,
      payTo,
      amount: 1000n,
      validBefore: deadline + 1n,
    });
    // The guardrails read the deployment's own name for its network.
    assert.deepEqual(settlementKind(first, 'base'), { network: 'base', asset: token });
  });
});
