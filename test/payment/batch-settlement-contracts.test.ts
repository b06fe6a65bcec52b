// The x402 `batch-settlement` contracts on the stack's anvil: our channel contract and ERC-3009
// deposit collector at their canonical addresses run what the unmodified @x402/evm client signs.
// A deposit through the collector funds the channel; the receiver authorizer's one signed claim
// of the latest cumulative voucher claims it once; `settle` sweeps it to the receiver; a signed
// refund returns unclaimed escrow once; the payer's timed withdrawal returns the rest only after
// the delay. The reference facilitator (@x402/evm's batch-settlement) deposits, claims and
// settles against the same contracts.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Contract, Interface, TypedDataEncoder, Wallet, hexlify, id, parseEther, type JsonRpcProvider } from 'ethers';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme as ReferenceBatchFacilitator } from '@x402/evm/batch-settlement/facilitator';
import { createWalletClient, http, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import {
  BATCH_SETTLEMENT_ABI,
  BATCH_SETTLEMENT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ABI,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  batchSettlementContract,
} from '../../contracts/batch-settlement.ts';
import { tokenContract } from '../../contracts/token.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { erc3009DepositArgs } from '../../facilitator/batch-chain.ts';
import { compileContract } from '../../scripts/dev/compile.ts';
import type { BatchSettlementPayment, ChannelConfig } from '../../x402/schemes/batch-settlement/schemas.ts';
import {
  batchSettlementDomain,
  channelIdOf,
  claimBatchDigest,
  refundDigest,
} from '../../x402/schemes/batch-settlement/typed-data.ts';
import { verifyDeposit, verifyVoucher } from '../../x402/schemes/batch-settlement/verify.ts';
import { batchChallenge, batchPayer, highS, type BatchTerms } from '../support/batch-settlement.ts';
import { pastValidBefore } from '../support/facilitator.ts';
import { CONTRACTS_CACHE_DIR, stack } from '../support/stack.ts';
import { chainProvider, newWallet as newFundedWallet } from '../support/x402.ts';

const PRICE = 1_000n;
const DEPOSIT = 10_000n;
const errors = new Interface([...BATCH_SETTLEMENT_ABI, 'error ECDSAInvalidSignatureS(bytes32 s)']);

type DepositPayload = Extract<BatchSettlementPayment['payload'], { type: 'deposit' }>;

describe('x402 batch-settlement contracts on the dev chain', function () {
  let provider: JsonRpcProvider;
  let token: string;
  /** Sends the relay-friendly calls (deposit, claimWithSignature, refundWithSignature, settle). */
  let relayer: Wallet;

  before(async function () {
    provider = chainProvider();
    token = stack().infra.tokenAddress;
    relayer = await newWallet({ eth: true });
  });

  after(() => provider?.destroy());

  const newWallet = (opts: { eth?: boolean; usdc?: bigint }) => newFundedWallet(opts, provider);

  const balance = (account: string): Promise<bigint> => tokenContract(token, provider).balanceOf(account);
  const channels = (sender: Wallet | JsonRpcProvider = provider) => batchSettlementContract(sender);

  async function channel(channelId: string): Promise<[bigint, bigint]> {
    const [balanceOf, totalClaimed] = await channels().channels!(channelId);
    return [balanceOf, totalClaimed];
  }

  async function revertsWith(sending: Promise<unknown>, name: string): Promise<void> {
    await assert.rejects(sending, (err: any) => {
      assert.equal(err.data && errors.parseError(err.data)?.name, name, err.shortMessage ?? err.message);
      return true;
    });
  }

  const mined = async (sending: Promise<{ wait(): Promise<unknown> }>) => (await sending).wait();

  /** A payer with 20 USDC (and ETH when it must send its own withdrawal), its channel terms and its first payment. */
  async function openChannel(opts: { eth?: boolean } = {}) {
    const payerWallet = await newWallet({ eth: opts.eth, usdc: 2n * DEPOSIT });
    const receiver = (await newWallet({})).address;
    const authorizer = await newWallet({ eth: true });
    const terms: BatchTerms = {
      asset: token,
      payTo: receiver,
      receiverAuthorizer: authorizer.address,
      amount: PRICE,
      minDeposit: DEPOSIT,
    };
    const payer = batchPayer(payerWallet.privateKey);
    const first = await payer.pay(terms);
    assert.equal(first.payload.type, 'deposit');
    return { payerWallet, receiver, authorizer, terms, payer, first: first.payload as DepositPayload };
  }

  function depositArgs(payload: DepositPayload) {
    assert.ok('erc3009Authorization' in payload.deposit.authorization);
    return erc3009DepositArgs(payload);
  }

  function claimRow(config: ChannelConfig, voucher: { maxClaimableAmount: string; signature: string }, total: bigint) {
    return {
      voucher: { channel: config, maxClaimableAmount: BigInt(voucher.maxClaimableAmount) },
      signature: voucher.signature,
      totalClaimed: total,
    };
  }

  it('places the channel contract and the collector at their canonical addresses, with the functions the project names', async function () {
    const contract = channels();
    assert.equal(
      await contract.CHANNEL_CONFIG_TYPEHASH!(),
      id(
        'ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)',
      ),
    );
    assert.equal(await contract.VOUCHER_TYPEHASH!(), id('Voucher(bytes32 channelId,uint128 maxClaimableAmount)'));
    assert.equal(await contract.REFUND_TYPEHASH!(), id('Refund(bytes32 channelId,uint256 nonce,uint128 amount)'));
    assert.equal(await contract.DOMAIN_SEPARATOR!(), TypedDataEncoder.hashDomain(batchSettlementDomain(8453)));
    const collector = new Contract(ERC3009_DEPOSIT_COLLECTOR_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ABI, provider);
    assert.equal(await collector.x402BatchSettlement!(), BATCH_SETTLEMENT_ADDRESS);
    for (const [name, abi] of [
      ['X402BatchSettlement', BATCH_SETTLEMENT_ABI],
      ['ERC3009DepositCollector', ERC3009_DEPOSIT_COLLECTOR_ABI],
    ] as const) {
      const compiled = new Interface((await compileContract(name, CONTRACTS_CACHE_DIR)).abi);
      const have = new Set(compiled.fragments.map((f) => f.format('sighash')));
      for (const fragment of new Interface(abi).fragments)
        assert.ok(have.has(fragment.format('sighash')), fragment.format());
    }
  });

  it('deposits, claims two vouchers once, settles, refunds with a signature and withdraws the rest after the delay', async function () {
    const { payerWallet, receiver, authorizer, terms, payer, first } = await openChannel({ eth: true });
    const config = first.channelConfig;
    const channelId = first.voucher.channelId.toLowerCase();
    assert.equal(await channels().getChannelId!(config), channelId);
    assert.equal(channelIdOf(8453, config), channelId);

    // The deposit: checked off chain, then pulled through the collector by anyone (here the relayer).
    const now = (await provider.getBlock('latest'))!.timestamp;
    const fresh = { balance: 0n, totalClaimed: 0n, chargedCumulativeAmount: 0n };
    const checked = await verifyDeposit(
      first,
      {
        token: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: token },
        payTo: receiver,
        receiverAuthorizer: authorizer.address,
        withdrawDelay: 900,
        ceiling: PRICE,
        now,
        marginSeconds: 30,
      },
      fresh,
    );
    assert.ok(checked.ok, checked.ok ? '' : checked.cause);
    await mined(channels(relayer).deposit!(...depositArgs(first)));
    assert.deepEqual(await channel(channelId), [DEPOSIT, 0n]);
    assert.equal(await balance(payerWallet.address), DEPOSIT);
    assert.equal(await balance(ERC3009_DEPOSIT_COLLECTOR_ADDRESS), 0n);
    // The same authorization again: its ERC-3009 nonce is spent.
    await assert.rejects(channels(relayer).deposit!(...depositArgs(first)));
    // Nobody but the channel contract may make the collector pull.
    const collector = new Contract(ERC3009_DEPOSIT_COLLECTOR_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ABI, relayer);
    await assert.rejects(collector.collect!(payerWallet.address, token, 1n, channelId, '0x'));

    // Two more calls: cumulative vouchers for 2000 and 3000.
    await payer.record(channelId, { balance: DEPOSIT, charged: PRICE });
    const second = (await payer.pay(terms)).payload;
    await payer.record(channelId, { balance: DEPOSIT, charged: 2n * PRICE });
    const third = (await payer.pay(terms)).payload;
    assert.equal(third.voucher.maxClaimableAmount, '3000');
    const state = { balance: DEPOSIT, totalClaimed: 0n, chargedCumulativeAmount: 2n * PRICE };
    const expect = {
      chainId: 8453,
      asset: token,
      payTo: receiver,
      receiverAuthorizer: authorizer.address,
      withdrawDelay: 900,
      ceiling: PRICE,
    };
    assert.ok((await verifyVoucher(third, expect, state)).ok);

    // Someone other than the receiver side may not claim directly; the receiver side may not claim above the ceiling.
    await revertsWith(channels(relayer).claim!([claimRow(config, third.voucher, 3n * PRICE)]), 'NotAuthorizedToClaim');
    await revertsWith(
      channels(authorizer).claim!([claimRow(config, third.voucher, 3n * PRICE + 1n)]),
      'ClaimExceedsCeiling',
    );

    // The high-s twin of the payer's voucher signature: OpenZeppelin's ECDSA refuses it on chain,
    // as the off-chain check does.
    const twin = { ...third.voucher, signature: highS(third.voucher.signature) };
    assert.deepEqual(await verifyVoucher({ ...third, voucher: twin }, expect, state), {
      ok: false,
      cause: 'invalid_batch_settlement_evm_voucher_signature',
    });
    await revertsWith(channels(authorizer).claim!([claimRow(config, twin, 3n * PRICE)]), 'ECDSAInvalidSignatureS');

    // One claim of the latest voucher, signed by the receiver authorizer, relayed by anyone.
    const rows = [claimRow(config, third.voucher, 3n * PRICE)];
    const claimSignature = authorizer.signingKey.sign(
      claimBatchDigest(8453, [{ channelId, maxClaimableAmount: 3n * PRICE, totalClaimed: 3n * PRICE }]),
    ).serialized;
    assert.equal(
      await channels().getClaimBatchDigest!(rows),
      claimBatchDigest(8453, [{ channelId, maxClaimableAmount: 3n * PRICE, totalClaimed: 3n * PRICE }]),
    );
    await mined(channels(relayer).claimWithSignature!(rows, claimSignature));
    assert.deepEqual(await channel(channelId), [DEPOSIT, 3n * PRICE]);
    // The same claim again, and the older voucher: nothing more is claimed.
    await mined(channels(relayer).claimWithSignature!(rows, claimSignature));
    const older = [claimRow(config, second.voucher, 2n * PRICE)];
    const olderSignature = authorizer.signingKey.sign(
      claimBatchDigest(8453, [{ channelId, maxClaimableAmount: 2n * PRICE, totalClaimed: 2n * PRICE }]),
    ).serialized;
    await mined(channels(relayer).claimWithSignature!(older, olderSignature));
    assert.deepEqual(await channel(channelId), [DEPOSIT, 3n * PRICE]);
    const [claimedTotal, settledTotal] = await channels().receivers!(receiver, token);
    assert.deepEqual([claimedTotal, settledTotal], [3n * PRICE, 0n]);
    // A row changed after the authorizer signed the batch reverts.
    await revertsWith(
      channels(relayer).claimWithSignature!([claimRow(config, third.voucher, 3n * PRICE + 1n)], claimSignature),
      'InvalidSignature',
    );

    // settle sweeps what was claimed to the receiver, once.
    await mined(channels(relayer).settle!(receiver, token));
    assert.equal(await balance(receiver), 3n * PRICE);
    await mined(channels(relayer).settle!(receiver, token));
    assert.equal(await balance(receiver), 3n * PRICE);

    // The client's refund request for 2000: the receiver authorizer signs it at the refund nonce.
    await payer.record(channelId, { balance: DEPOSIT, charged: 3n * PRICE });
    const refund = (await payer.refund(terms, 2_000n)).payload;
    assert.equal(refund.type, 'refund');
    assert.equal(refund.voucher.maxClaimableAmount, '3000');
    assert.ok(
      (
        await verifyVoucher(
          refund,
          { ...expect, ceiling: 0n },
          { ...state, totalClaimed: 3n * PRICE, chargedCumulativeAmount: 3n * PRICE },
        )
      ).ok,
    );
    const nonce = await channels().refundNonce!(channelId);
    assert.equal(nonce, 0n);
    const refundSignature = authorizer.signingKey.sign(refundDigest(8453, channelId, nonce, 2_000n)).serialized;
    await mined(channels(relayer).refundWithSignature!(config, 2_000n, nonce, refundSignature));
    assert.equal(await balance(payerWallet.address), DEPOSIT + 2_000n);
    assert.deepEqual(await channel(channelId), [DEPOSIT - 2_000n, 3n * PRICE]);
    await revertsWith(
      channels(relayer).refundWithSignature!(config, 2_000n, nonce, refundSignature),
      'InvalidRefundNonce',
    );

    // The payer's timed withdrawal of the unclaimed rest: not before the delay, then all of it.
    const rest = DEPOSIT - 2_000n - 3n * PRICE;
    await revertsWith(channels(payerWallet).initiateWithdraw!(config, rest + 1n), 'WithdrawAmountExceedsAvailable');
    await mined(channels(payerWallet).initiateWithdraw!(config, rest));
    const [pending, initiatedAt] = await channels().pendingWithdrawals!(channelId);
    assert.equal(pending, rest);
    await revertsWith(channels(payerWallet).finalizeWithdraw!(config), 'WithdrawDelayNotElapsed');
    await revertsWith(channels(relayer).finalizeWithdraw!(config), 'NotAuthorizedToFinalizeWithdraw');
    await pastValidBefore(provider, Number(initiatedAt) + config.withdrawDelay, async () => {
      await mined(channels(payerWallet).finalizeWithdraw!(config));
    });
    assert.equal(await balance(payerWallet.address), DEPOSIT + 2_000n + rest);
    assert.deepEqual(await channel(channelId), [3n * PRICE, 3n * PRICE]);
    assert.deepEqual([...(await channels().pendingWithdrawals!(channelId))], [0n, 0n]);
    await revertsWith(channels(payerWallet).finalizeWithdraw!(config), 'WithdrawalNotPending');
  });

  it('is driven by the reference facilitator (@x402/evm batch-settlement): deposit, voucher, claim, settle', async function () {
    const facilitatorKey = hexlify(randomBytes(32)) as `0x${string}`;
    const account = privateKeyToAccount(facilitatorKey);
    await fund(stack().infra.chainRpcUrl, token, account.address, { eth: parseEther('1') });
    const client = createWalletClient({ account, chain: base, transport: http(stack().infra.chainRpcUrl) }).extend(
      publicActions,
    );
    const authorizerAccount = privateKeyToAccount(hexlify(randomBytes(32)) as `0x${string}`);
    const reference = new ReferenceBatchFacilitator(
      toFacilitatorEvmSigner({ ...client, address: account.address } as any),
      authorizerAccount as any,
    );
    const payerWallet = await newWallet({ usdc: 2n * DEPOSIT });
    const receiver = (await newWallet({})).address;
    const terms: BatchTerms = {
      asset: token,
      payTo: receiver,
      receiverAuthorizer: authorizerAccount.address,
      amount: PRICE,
      minDeposit: DEPOSIT,
    };
    const [requirements] = batchChallenge(terms).accepts;
    const payer = batchPayer(payerWallet.privateKey);

    const deposit = await payer.pay(terms);
    const verdict = await reference.verify(deposit as any, requirements as any);
    assert.equal(verdict.isValid, true, verdict.invalidReason);
    const deposited = await reference.settle(deposit as any, requirements as any);
    assert.equal(deposited.success, true, `${deposited.errorReason}: ${deposited.errorMessage}`);
    const channelId = deposit.payload.voucher.channelId;
    assert.deepEqual(await channel(channelId), [DEPOSIT, 0n]);

    await payer.record(channelId, { balance: DEPOSIT, charged: PRICE });
    const voucher = await payer.pay(terms);
    const voucherVerdict = await reference.verify(voucher as any, requirements as any);
    assert.equal(voucherVerdict.isValid, true, voucherVerdict.invalidReason);

    const claims = [claimRow(voucher.payload.channelConfig, voucher.payload.voucher, 2n * PRICE)].map((row) => ({
      ...row,
      voucher: { ...row.voucher, maxClaimableAmount: String(row.voucher.maxClaimableAmount) },
      totalClaimed: String(row.totalClaimed),
    }));
    const claimed = await reference.settle(
      { ...voucher, payload: { type: 'claim', claims } } as any,
      requirements as any,
    );
    assert.equal(claimed.success, true, `${claimed.errorReason}: ${claimed.errorMessage}`);
    assert.deepEqual(await channel(channelId), [DEPOSIT, 2n * PRICE]);

    const settled = await reference.settle(
      { ...voucher, payload: { type: 'settle', receiver, token } } as any,
      requirements as any,
    );
    assert.equal(settled.success, true, `${settled.errorReason}: ${settled.errorMessage}`);
    assert.equal(await balance(receiver), 2n * PRICE);
  });
});
