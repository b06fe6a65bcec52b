// The x402 `upto` scheme's pure part (x402/schemes/upto/): its constants and typed data agree
// with the reference package @x402/evm, and the verifier accepts what the unmodified reference
// client signs (approved payer and EIP-2612 sponsored permit) and refuses every altered term.
import assert from 'node:assert/strict';
import { Interface, Wallet, getAddress, id, type InterfaceAbi } from 'ethers';
import {
  PERMIT2_ADDRESS as REFERENCE_PERMIT2,
  uptoPermit2WitnessTypes,
  x402UptoPermit2ProxyABI,
  x402UptoPermit2ProxyAddress,
} from '@x402/evm';
import { PERMIT2_ADDRESS as PERMIT2_CONTRACT } from '../../contracts/permit2.ts';
import { UPTO_PROXY_ABI, UPTO_PROXY_ADDRESS as PROXY_CONTRACT } from '../../contracts/upto-proxy.ts';
import { UptoPayment } from '../../x402/schemes/upto/schemas.ts';
import { uptoSettleCall, uptoSettleCallOf } from '../../x402/schemes/upto/settle-args.ts';
import {
  PERMIT2_ADDRESS,
  UPTO_PERMIT_TYPES,
  UPTO_PROXY_ADDRESS,
  UPTO_WITNESS_TYPEHASH,
  UPTO_WITNESS_TYPE_STRING,
  permit2Domain,
} from '../../x402/schemes/upto/typed-data.ts';
import { verifyUptoPayment, type UptoExpectation } from '../../x402/schemes/upto/verify.ts';
import { signUptoPayment, UPTO_NETWORK, type UptoTerms } from '../support/upto.ts';

// Fixed keys: the payer, the payee and the facilitator of every case.
const payer = new Wallet('0x1111111111111111111111111111111111111111111111111111111111111111');
const payTo = new Wallet('0x2222222222222222222222222222222222222222222222222222222222222222').address;
const facilitator = new Wallet('0x3333333333333333333333333333333333333333333333333333333333333333').address;
const token = '0x5FbDB2315678afecb367f032d93F642f64180aa3';
const terms: UptoTerms = { asset: token, payTo, facilitator, amount: 5_000_000n };

function expectation(overrides: Partial<UptoExpectation> = {}): UptoExpectation {
  return {
    network: UPTO_NETWORK,
    token: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: token },
    payTo,
    facilitator,
    maxAmount: 5_000_000n,
    now: Math.floor(Date.now() / 1000),
    marginSeconds: 30,
    ...overrides,
  };
}

/** A chain where the payer has no Permit2 allowance and permit nonce 7. */
const noAllowance = {
  readContract: async ({ functionName }: { functionName: string }) => (functionName === 'nonces' ? 7n : 0n),
};

const clone = (payment: UptoPayment): UptoPayment => JSON.parse(JSON.stringify(payment)) as UptoPayment;

async function refusedWith(payment: UptoPayment, expect: UptoExpectation, cause: string) {
  assert.deepEqual(await verifyUptoPayment(payment, expect), { ok: false, cause });
}

describe('x402 upto scheme (pure part)', function () {
  it('names the addresses, witness type and proxy functions the reference package uses', function () {
    assert.equal(PERMIT2_ADDRESS, REFERENCE_PERMIT2);
    assert.equal(PERMIT2_CONTRACT, REFERENCE_PERMIT2);
    assert.equal(UPTO_PROXY_ADDRESS, x402UptoPermit2ProxyAddress);
    assert.equal(PROXY_CONTRACT, x402UptoPermit2ProxyAddress);
    assert.deepEqual(UPTO_PERMIT_TYPES, uptoPermit2WitnessTypes);
    assert.equal(UPTO_WITNESS_TYPEHASH, id('Witness(address to,address facilitator,uint256 validAfter)'));
    assert.ok(UPTO_WITNESS_TYPE_STRING.endsWith(')Witness(address to,address facilitator,uint256 validAfter)'));
    // Every function and error the reference facilitator's ABI names has the same selector in ours.
    const reference = new Interface(x402UptoPermit2ProxyABI as unknown as InterfaceAbi);
    const ours = new Interface(UPTO_PROXY_ABI);
    reference.forEachFunction((fn) => assert.equal(ours.getFunction(fn.name)?.selector, fn.selector, fn.name));
    // InvalidPermit2Address is the reference's constructor check; ours has no constructor (anvil_setCode).
    reference.forEachError((error) => {
      if (error.name !== 'InvalidPermit2Address')
        assert.equal(ours.getError(error.name)?.selector, error.selector, error.name);
    });
  });

  it("accepts the reference client's payment from a payer that approved Permit2", async function () {
    const { wire, payment } = await signUptoPayment(payer.privateKey, terms);
    const a = payment.payload.permit2Authorization;
    assert.equal(getAddress(a.spender), UPTO_PROXY_ADDRESS);
    assert.equal(a.witness.validAfter, '0');
    assert.match(a.nonce, /^[0-9]+$/);
    assert.equal(wire.extensions, undefined);
    const verified = await verifyUptoPayment(payment, expectation());
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);
    assert.equal(verified.signer, 'eoa');
    assert.equal(verified.payment.payer, payer.address);
    assert.equal(verified.payment.amount, 5_000_000n);
    assert.equal(verified.payment.permit2612, null);
    assert.equal(uptoSettleCall(verified.payment, 1_234n).method, 'settle');
  });

  it('accepts a payment permitting more than the maximum asked, refuses one permitting less', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    assert.ok((await verifyUptoPayment(payment, expectation({ maxAmount: 4_000_000n }))).ok);
    await refusedWith(payment, expectation({ maxAmount: 5_000_001n }), 'amount_mismatch');
  });

  it("accepts the client's EIP-2612 permit for Permit2 when the challenge offers gas sponsoring", async function () {
    const { wire, payment } = await signUptoPayment(payer.privateKey, { ...terms, sponsoring: true }, noAllowance);
    const info = (wire.extensions as any).eip2612GasSponsoring.info;
    assert.equal(getAddress(info.spender), PERMIT2_ADDRESS);
    assert.equal(info.amount, '5000000');
    assert.equal(info.nonce, '7');
    assert.equal(info.deadline, payment.payload.permit2Authorization.deadline);
    const verified = await verifyUptoPayment(payment, expectation());
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);
    assert.equal(verified.payment.permit2612?.value, 5_000_000n);
    assert.equal(uptoSettleCall(verified.payment, 1n).method, 'settleWithPermit');
  });

  it('refuses a sponsored permit that is not for Permit2, not for the permitted amount, or not signed by the payer', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, { ...terms, sponsoring: true }, noAllowance);
    const info = () => (payment.extensions as any).eip2612GasSponsoring.info;
    const altered = [
      (p: UptoPayment) => ((p.extensions as any).eip2612GasSponsoring.info.spender = UPTO_PROXY_ADDRESS),
      (p: UptoPayment) => ((p.extensions as any).eip2612GasSponsoring.info.amount = '5000001'),
      (p: UptoPayment) => ((p.extensions as any).eip2612GasSponsoring.info.nonce = '8'),
      (p: UptoPayment) =>
        ((p.extensions as any).eip2612GasSponsoring.info.signature = `${info().signature.slice(0, -4)}0000`),
      (p: UptoPayment) => ((p.extensions as any).eip2612GasSponsoring.info.deadline = 'soon'),
    ];
    for (const alter of altered) {
      const copy = clone(payment);
      alter(copy);
      await refusedWith(copy, expectation(), 'invalid_permit');
    }
  });

  it('reads a copy of the server declaration without a signed permit as no permit, as the x402 reference does', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const copy = clone(payment);
    (copy as any).extensions = {
      eip2612GasSponsoring: { info: { description: 'declared', version: '1' }, schema: {} },
    };
    const verified = await verifyUptoPayment(copy, expectation());
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);
    assert.equal(verified.payment.permit2612, null);
    assert.equal(uptoSettleCallOf(copy, 1n).method, 'settle');
  });

  it('refuses a payment for another spender, payee, facilitator, asset or network', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const otherSpender = clone(payment);
    otherSpender.payload.permit2Authorization.spender = PERMIT2_ADDRESS;
    await refusedWith(otherSpender, expectation(), 'spender_mismatch');
    await refusedWith(payment, expectation({ payTo: facilitator }), 'recipient_mismatch');
    await refusedWith(payment, expectation({ facilitator: payTo }), 'facilitator_mismatch');
    await refusedWith(
      payment,
      expectation({ token: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: payTo } }),
      'asset_mismatch',
    );
    await refusedWith(payment, expectation({ network: 'eip155:84532' }), 'network_mismatch');
  });

  it('refuses an expired authorization, one too close to its deadline, and one not yet valid', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, { ...terms, maxTimeoutSeconds: 60 });
    const now = Math.floor(Date.now() / 1000);
    await refusedWith(payment, expectation({ now: now + 61 }), 'expired');
    await refusedWith(payment, expectation({ marginSeconds: 120 }), 'expired');
    // The reference client always signs validAfter 0; a later one is signed here directly.
    const later = await signDirectly({ validAfter: BigInt(now + 600) });
    await refusedWith(later, expectation(), 'not_yet_valid');
  });

  it('refuses a tampered signature or a tampered authorization', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const badSignature = clone(payment);
    const sig = badSignature.payload.signature;
    badSignature.payload.signature = `${sig.slice(0, 10)}${sig[10] === 'a' ? 'b' : 'a'}${sig.slice(11)}`;
    await refusedWith(badSignature, expectation(), 'invalid_signature');
    const raised = clone(payment);
    raised.payload.permit2Authorization.permitted.amount = '6000000';
    await refusedWith(raised, expectation(), 'invalid_signature');
    const otherNonce = clone(payment);
    otherNonce.payload.permit2Authorization.nonce = '1';
    await refusedWith(otherNonce, expectation(), 'invalid_signature');
  });

  it('accepts a contract payer through the ERC-1271 check it is given, only when the check says yes', async function () {
    const { payment } = await signUptoPayment(payer.privateKey, terms);
    const wallet = '0x00000000000000000000000000000000000000aa';
    const ofWallet = clone(payment);
    ofWallet.payload.permit2Authorization.from = wallet;
    await refusedWith(ofWallet, expectation(), 'invalid_signature');
    const asked: string[] = [];
    const yes = async (signer: string) => (asked.push(signer), true);
    const accepted = await verifyUptoPayment(ofWallet, expectation(), yes);
    assert.ok(accepted.ok && accepted.signer === 'contract');
    assert.deepEqual(asked, [getAddress(wallet)]);
    assert.deepEqual(await verifyUptoPayment(ofWallet, expectation(), async () => false), {
      ok: false,
      cause: 'invalid_signature',
    });
  });

  it('accepts a hex nonce (as the scheme spec writes it) and refuses one beyond uint256', async function () {
    const hexNonce = await signDirectly({ nonce: 0xf3746613n });
    hexNonce.payload.permit2Authorization.nonce = '0xf3746613';
    assert.ok((await verifyUptoPayment(hexNonce, expectation())).ok);
    assert.equal(
      UptoPayment.safeParse({
        ...hexNonce,
        payload: {
          ...hexNonce.payload,
          permit2Authorization: { ...hexNonce.payload.permit2Authorization, nonce: `0x1${'0'.repeat(64)}` },
        },
      }).success,
      false,
    );
  });
});

/** An upto payment signed with ethers from our own typed data (for terms the reference client never writes). */
async function signDirectly(overrides: { validAfter?: bigint; nonce?: bigint }): Promise<UptoPayment> {
  const deadline = BigInt(Math.floor(Date.now() / 1000) + 300);
  const message = {
    permitted: { token, amount: 5_000_000n },
    spender: UPTO_PROXY_ADDRESS,
    nonce: overrides.nonce ?? 42n,
    deadline,
    witness: { to: payTo, facilitator, validAfter: overrides.validAfter ?? 0n },
  };
  const signature = await payer.signTypedData(permit2Domain(8453), UPTO_PERMIT_TYPES, message);
  return UptoPayment.parse({
    x402Version: 2,
    accepted: { scheme: 'upto', network: UPTO_NETWORK, amount: '5000000', asset: token, payTo, maxTimeoutSeconds: 300 },
    payload: {
      signature,
      permit2Authorization: {
        from: payer.address,
        permitted: { token, amount: '5000000' },
        spender: UPTO_PROXY_ADDRESS,
        nonce: String(message.nonce),
        deadline: String(deadline),
        witness: { to: payTo, facilitator, validAfter: String(message.witness.validAfter) },
      },
    },
  });
}
