// The x402 `upto` scheme's contracts on the stack's anvil: our Permit2 signature transfer and
// upto proxy at their canonical addresses settle what the unmodified @x402/evm client signs.
// A facilitator charges the actual amount (at most the signed maximum) once; a replay, an excess,
// another sender, a charge before validAfter or after the deadline all revert; a payer without a
// Permit2 allowance is charged through its EIP-2612 permit (settleWithPermit). The reference
// facilitator (@x402/evm's upto scheme) verifies and settles against the same contracts.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  Interface,
  MaxUint256,
  Signature,
  TypedDataEncoder,
  Wallet,
  concat,
  hexlify,
  parseEther,
  toBeHex,
  type JsonRpcProvider,
} from 'ethers';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { UptoEvmScheme as ReferenceUptoFacilitator } from '@x402/evm/upto/facilitator';
import { createWalletClient, http, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import { PERMIT2_ABI, PERMIT2_ADDRESS, nonceUsed, permit2Contract } from '../../contracts/permit2.ts';
import { tokenContract } from '../../contracts/token.ts';
import { UPTO_PROXY_ABI, UPTO_PROXY_ADDRESS, uptoProxyContract } from '../../contracts/upto-proxy.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { compileContract } from '../../scripts/dev/compile.ts';
import type { UptoPayment } from '../../x402/schemes/upto/schemas.ts';
import { uptoSettleCall } from '../../x402/schemes/upto/settle-args.ts';
import {
  UPTO_PERMIT_TYPES,
  UPTO_WITNESS_TYPEHASH,
  UPTO_WITNESS_TYPE_STRING,
  permit2Domain,
  recoverDigestSigner,
  uptoPermitDigest,
} from '../../x402/schemes/upto/typed-data.ts';
import { verifyUptoPayment, type VerifiedUptoPayment } from '../../x402/schemes/upto/verify.ts';
import { CONTRACTS_CACHE_DIR, stack } from '../support/stack.ts';
import { rpcReader, signUptoPayment, uptoChallenge, UPTO_NETWORK } from '../support/upto.ts';
import { chainProvider, newWallet as newFundedWallet } from '../support/x402.ts';

const MAX = 5_000_000n;
/** The order of secp256k1's group: s and n - s sign the same message. */
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
const ACTUAL = 1_234_567n;
// Proxy errors and the Permit2 errors that pass through it, decoded by name.
const errorsOf = [new Interface(UPTO_PROXY_ABI), new Interface(PERMIT2_ABI)];

describe('x402 upto contracts on the dev chain', function () {
  let provider: JsonRpcProvider;
  let token: string;
  let facilitator: Wallet;

  before(async function () {
    provider = chainProvider();
    token = stack().infra.tokenAddress;
    facilitator = await newWallet({ eth: true });
  });

  after(() => provider?.destroy());

  const newWallet = (opts: { eth?: boolean; usdc?: bigint }) => newFundedWallet(opts, provider);

  /** A payer holding 10 USDC; `approved`: it has approved Permit2 itself (and so holds ETH for that). */
  async function newPayer(approved: boolean): Promise<Wallet> {
    const payer = await newWallet({ eth: approved, usdc: 10_000_000n });
    if (approved) await (await tokenContract(token, payer).approve(PERMIT2_ADDRESS, MaxUint256)).wait();
    return payer;
  }

  const balance = (account: string): Promise<bigint> => tokenContract(token, provider).balanceOf(account);

  async function chainNow(): Promise<number> {
    return (await provider.getBlock('latest'))!.timestamp;
  }

  async function verified(payment: UptoPayment, payTo: string, by = facilitator.address): Promise<VerifiedUptoPayment> {
    const result = await verifyUptoPayment(payment, {
      network: UPTO_NETWORK,
      token: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: token },
      payTo,
      facilitator: by,
      maxAmount: MAX,
      now: await chainNow(),
      marginSeconds: 30,
    });
    assert.ok(result.ok, result.ok ? '' : result.cause);
    return result.payment;
  }

  function charge(payment: VerifiedUptoPayment, amount: bigint, sender: Wallet = facilitator) {
    const { method, args } = uptoSettleCall(payment, amount);
    return uptoProxyContract(sender)[method]!(...args) as Promise<{ wait(): Promise<unknown> }>;
  }

  async function revertsWith(sending: Promise<unknown>, name: string): Promise<void> {
    await assert.rejects(sending, (err: any) => {
      const decoded = err.data ? errorsOf.map((i) => i.parseError(err.data)).find(Boolean) : null;
      assert.equal(decoded?.name, name, `expected ${name}, got: ${err.shortMessage ?? err.message}`);
      return true;
    });
  }

  /** An authorization signed directly from our typed data, for windows the reference client never signs. */
  async function signedWith(payer: Wallet, payTo: string, window: { validAfter: number; deadline: number }) {
    const permit = {
      token,
      amount: MAX,
      spender: UPTO_PROXY_ADDRESS,
      nonce: BigInt(hexlify(randomBytes(32))),
      deadline: BigInt(window.deadline),
      to: payTo,
      facilitator: facilitator.address,
      validAfter: BigInt(window.validAfter),
    };
    const message = {
      permitted: { token, amount: MAX },
      spender: UPTO_PROXY_ADDRESS,
      nonce: permit.nonce,
      deadline: permit.deadline,
      witness: { to: payTo, facilitator: facilitator.address, validAfter: permit.validAfter },
    };
    const signature = await payer.signTypedData(permit2Domain(8453), UPTO_PERMIT_TYPES, message);
    return { ...permit, payer: payer.address, signature, permit2612: null };
  }

  it('places Permit2 and the upto proxy at their canonical addresses, with the functions the project names', async function () {
    const proxy = uptoProxyContract(provider);
    assert.equal(await proxy.PERMIT2(), PERMIT2_ADDRESS);
    assert.equal(await proxy.WITNESS_TYPEHASH(), UPTO_WITNESS_TYPEHASH);
    assert.equal(await proxy.WITNESS_TYPE_STRING(), UPTO_WITNESS_TYPE_STRING);
    assert.equal(await permit2Contract(provider).DOMAIN_SEPARATOR(), TypedDataEncoder.hashDomain(permit2Domain(8453)));
    for (const [name, abi] of [
      ['Permit2', PERMIT2_ABI],
      ['UptoPermit2Proxy', UPTO_PROXY_ABI],
    ] as const) {
      const compiled = new Interface((await compileContract(name, CONTRACTS_CACHE_DIR)).abi);
      const have = new Set(compiled.fragments.map((f) => f.format('sighash')));
      for (const fragment of new Interface(abi).fragments)
        assert.ok(have.has(fragment.format('sighash')), fragment.format());
    }
  });

  it('charges the actual amount from an approved payer once; a replay, an excess or another sender reverts', async function () {
    const payer = await newPayer(true);
    const payTo = (await newWallet({})).address;
    const { payment } = await signUptoPayment(payer.privateKey, {
      asset: token,
      payTo,
      facilitator: facilitator.address,
      amount: MAX,
    });
    const upto = await verified(payment, payTo);
    const word = () => permit2Contract(provider).nonceBitmap(payer.address, upto.nonce >> 8n) as Promise<bigint>;
    assert.equal(nonceUsed(await word(), upto.nonce), false);

    const other = await newWallet({ eth: true });
    await revertsWith(charge(upto, ACTUAL, other), 'UnauthorizedFacilitator');
    await revertsWith(charge(upto, MAX + 1n), 'AmountExceedsPermitted');

    const before = { payer: await balance(payer.address), payTo: await balance(payTo) };
    await (await charge(upto, ACTUAL)).wait();
    assert.equal(await balance(payer.address), before.payer - ACTUAL);
    assert.equal(await balance(payTo), before.payTo + ACTUAL);
    assert.equal(nonceUsed(await word(), upto.nonce), true);

    await revertsWith(charge(upto, 1n), 'InvalidNonce');
    assert.equal(await balance(payTo), before.payTo + ACTUAL);
  });

  it('takes a high-s copy of the payer signature on chain, as the published Permit2 does, once; the verifiers refuse it off chain', async function () {
    const payer = await newPayer(true);
    const payTo = (await newWallet({})).address;
    const { payment } = await signUptoPayment(payer.privateKey, {
      asset: token,
      payTo,
      facilitator: facilitator.address,
      amount: MAX,
    });
    const upto = await verified(payment, payTo);
    // (r, n - s, v flipped) recovers the same signer through ecrecover, which the published
    // Permit2 uses; ethers (so the gateway's and the facilitator's checks) takes only low s.
    const sig = Signature.from(upto.signature);
    const malleated = concat([sig.r, toBeHex(SECP256K1_N - BigInt(sig.s), 32), toBeHex(sig.v === 27 ? 28 : 27, 1)]);
    assert.equal(recoverDigestSigner(uptoPermitDigest(8453, upto), malleated), null);

    const before = await balance(payTo);
    await (await charge({ ...upto, signature: malleated }, ACTUAL)).wait();
    assert.equal(await balance(payTo), before + ACTUAL);
    await revertsWith(charge(upto, ACTUAL), 'InvalidNonce');
  });

  it('reverts a charge before validAfter, after the deadline, or of a nonce the payer invalidated', async function () {
    const payer = await newPayer(true);
    const payTo = (await newWallet({})).address;
    const now = await chainNow();
    await revertsWith(
      charge(await signedWith(payer, payTo, { validAfter: now + 3600, deadline: now + 7200 }), 1n),
      'PaymentTooEarly',
    );
    await revertsWith(
      charge(await signedWith(payer, payTo, { validAfter: 0, deadline: now - 1 }), 1n),
      'SignatureExpired',
    );

    const cancelled = await signedWith(payer, payTo, { validAfter: 0, deadline: now + 3600 });
    await (
      await permit2Contract(payer).invalidateUnorderedNonces(cancelled.nonce >> 8n, 1n << (cancelled.nonce & 0xffn))
    ).wait();
    await revertsWith(charge(cancelled, 1n), 'InvalidNonce');
    assert.equal(await balance(payTo), 0n);
  });

  it('charges a payer without a Permit2 allowance through its EIP-2612 permit (settleWithPermit)', async function () {
    const payer = await newPayer(false);
    const payTo = (await newWallet({})).address;
    const { wire, payment } = await signUptoPayment(
      payer.privateKey,
      { asset: token, payTo, facilitator: facilitator.address, amount: MAX, sponsoring: true },
      rpcReader(stack().infra.chainRpcUrl),
    );
    assert.ok(wire.extensions?.eip2612GasSponsoring, 'the client signed a permit');
    const upto = await verified(payment, payTo);
    assert.ok(upto.permit2612);
    const usdc = tokenContract(token, provider);

    await (await charge(upto, ACTUAL)).wait();
    assert.equal(await balance(payer.address), 10_000_000n - ACTUAL);
    assert.equal(await balance(payTo), ACTUAL);
    assert.equal(await usdc.nonces(payer.address), 1n);
    assert.equal(await usdc.allowance(payer.address, PERMIT2_ADDRESS), MAX - ACTUAL);
  });

  it('is settled by the reference facilitator (@x402/evm upto), with and without a sponsored permit', async function () {
    const facilitatorKey = hexlify(randomBytes(32)) as `0x${string}`;
    const account = privateKeyToAccount(facilitatorKey);
    await fund(stack().infra.chainRpcUrl, token, account.address, { eth: parseEther('1') });
    const client = createWalletClient({ account, chain: base, transport: http(stack().infra.chainRpcUrl) }).extend(
      publicActions,
    );
    const reference = new ReferenceUptoFacilitator(
      toFacilitatorEvmSigner({ ...client, address: account.address } as any),
    );

    for (const sponsoring of [false, true]) {
      const payer = await newPayer(!sponsoring);
      const payTo = (await newWallet({})).address;
      const terms = { asset: token, payTo, facilitator: account.address, amount: MAX, sponsoring };
      const { wire } = await signUptoPayment(payer.privateKey, terms, rpcReader(stack().infra.chainRpcUrl));
      const [requirements] = uptoChallenge(terms).accepts;
      const verdict = await reference.verify(wire as any, requirements as any);
      assert.equal(verdict.isValid, true, `${sponsoring}: ${verdict.invalidReason}`);
      const settled = await reference.settle(wire as any, { ...requirements, amount: String(ACTUAL) } as any);
      assert.equal(settled.success, true, `${sponsoring}: ${settled.errorReason}`);
      assert.equal(settled.amount, String(ACTUAL));
      assert.equal(await balance(payTo), ACTUAL);
      assert.equal(await balance(payer.address), 10_000_000n - ACTUAL);
    }
  });
});
