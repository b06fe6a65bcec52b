// The x402 `batch-settlement` scheme's pure part (x402/schemes/batch-settlement/): its addresses
// and typed data agree with the reference package @x402/evm, and the checks accept the deposit,
// vouchers and refund the unmodified reference client signs and refuse every altered term with
// the scheme's own error name.
import assert from 'node:assert/strict';
import { Wallet, ZeroAddress, getAddress, hexlify, randomBytes } from 'ethers';
import {
  BATCH_SETTLEMENT_ADDRESS as REFERENCE_BATCH_SETTLEMENT,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS as REFERENCE_COLLECTOR,
  BATCH_SETTLEMENT_DOMAIN,
  claimBatchTypes,
  refundTypes,
  voucherTypes,
} from '@x402/evm';
import { computeChannelId } from '@x402/evm/batch-settlement/client';
import { hashTypedData } from 'viem';
import {
  BATCH_SETTLEMENT_ADDRESS as CONTRACT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS as CONTRACT_COLLECTOR,
} from '../../contracts/batch-settlement.ts';
import type { BatchSettlementPayment, ChannelConfig } from '../../x402/schemes/batch-settlement/schemas.ts';
import {
  BATCH_SETTLEMENT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  channelIdOf,
  claimBatchDigest,
  refundDigest,
  voucherDigest,
} from '../../x402/schemes/batch-settlement/typed-data.ts';
import {
  verifyDeposit,
  verifyVoucher,
  type ChannelState,
  type DepositExpectation,
  type VoucherExpectation,
  verifyClaimRow,
} from '../../x402/schemes/batch-settlement/verify.ts';
import { batchPayer, highS, type BatchTerms } from '../support/batch-settlement.ts';
import { parseBatchSettleRequest } from '../../x402/schemes/batch-settlement/settle-request.ts';
import { sameSettlement } from '../../facilitator/settlement/request.ts';

const PAYER_KEY = '0x1111111111111111111111111111111111111111111111111111111111111111';
const payTo = new Wallet('0x2222222222222222222222222222222222222222222222222222222222222222').address;
const authorizer = new Wallet('0x3333333333333333333333333333333333333333333333333333333333333333').address;
const token = '0x5FbDB2315678afecb367f032d93F642f64180aa3';
const terms: BatchTerms = { asset: token, payTo, receiverAuthorizer: authorizer, amount: 1_000n, minDeposit: 10_000n };
const tokenDomain = { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: token };
const fresh: ChannelState = { balance: 0n, totalClaimed: 0n, chargedCumulativeAmount: 0n };

function voucherExpectation(overrides: Partial<VoucherExpectation> = {}): VoucherExpectation {
  return {
    chainId: 8453,
    asset: token,
    payTo,
    receiverAuthorizer: authorizer,
    withdrawDelay: 900,
    ceiling: 1_000n,
    ...overrides,
  };
}

function depositExpectation(overrides: Partial<DepositExpectation> = {}): DepositExpectation {
  return {
    token: tokenDomain,
    payTo,
    receiverAuthorizer: authorizer,
    withdrawDelay: 900,
    ceiling: 1_000n,
    now: Math.floor(Date.now() / 1000),
    marginSeconds: 30,
    minDeposit: 10_000n,
    ...overrides,
  };
}

const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

describe('x402 batch-settlement scheme (pure part)', function () {
  it('names the addresses and signs the typed data the reference package does', function () {
    assert.equal(BATCH_SETTLEMENT_ADDRESS, REFERENCE_BATCH_SETTLEMENT);
    assert.equal(CONTRACT_ADDRESS, REFERENCE_BATCH_SETTLEMENT);
    assert.equal(ERC3009_DEPOSIT_COLLECTOR_ADDRESS, REFERENCE_COLLECTOR);
    assert.equal(CONTRACT_COLLECTOR, REFERENCE_COLLECTOR);
    const config: ChannelConfig = {
      payer: payTo,
      payerAuthorizer: payTo,
      receiver: payTo,
      receiverAuthorizer: authorizer,
      token,
      withdrawDelay: 900,
      salt: `0x${'ab'.repeat(32)}`,
    };
    const channelId = channelIdOf(8453, config);
    assert.equal(channelId, computeChannelId(config as never, 'eip155:8453').toLowerCase());
    const domain = {
      ...BATCH_SETTLEMENT_DOMAIN,
      chainId: 8453,
      verifyingContract: REFERENCE_BATCH_SETTLEMENT,
    } as const;
    const id = channelId as `0x${string}`;
    assert.equal(
      voucherDigest(8453, channelId, 7n),
      hashTypedData({
        domain,
        types: voucherTypes,
        primaryType: 'Voucher',
        message: { channelId: id, maxClaimableAmount: 7n },
      }),
    );
    assert.equal(
      refundDigest(8453, channelId, 2n, 5n),
      hashTypedData({
        domain,
        types: refundTypes,
        primaryType: 'Refund',
        message: { channelId: id, nonce: 2n, amount: 5n },
      }),
    );
    const claims = [
      { channelId: id, maxClaimableAmount: 9n, totalClaimed: 8n },
      { channelId: `0x${'cd'.repeat(32)}` as const, maxClaimableAmount: 3n, totalClaimed: 3n },
    ];
    assert.equal(
      claimBatchDigest(8453, claims),
      hashTypedData({ domain, types: claimBatchTypes, primaryType: 'ClaimBatch', message: { claims } }),
    );
  });

  it('puts a voucher’s digest together as hashTypedData does, for any channel, amount and chain, and refuses what the encoder refuses', function () {
    const cases: Array<[number, string, bigint]> = [
      [8453, `0x${'00'.repeat(32)}`, 0n],
      [84532, `0x${'ff'.repeat(32)}`, (1n << 128n) - 1n],
      [31337, `0x${'AB'.repeat(32)}`, 1n],
    ];
    for (let i = 0; i < 32; i++)
      cases.push([1 + i * 977, hexlify(randomBytes(32)), BigInt(hexlify(randomBytes(1 + (i % 16))))]);
    for (const [chainId, channelId, amount] of cases)
      assert.equal(
        voucherDigest(chainId, channelId, amount),
        hashTypedData({
          domain: { ...BATCH_SETTLEMENT_DOMAIN, chainId, verifyingContract: REFERENCE_BATCH_SETTLEMENT },
          types: voucherTypes,
          primaryType: 'Voucher',
          message: { channelId: channelId as `0x${string}`, maxClaimableAmount: amount },
        }),
        `${chainId} ${channelId} ${amount}`,
      );
    assert.throws(() => voucherDigest(8453, `0x${'00'.repeat(31)}`, 1n));
    assert.throws(() => voucherDigest(8453, `0x${'zz'.repeat(32)}`, 1n));
    assert.throws(() => voucherDigest(8453, `0x${'00'.repeat(32)}`, -1n));
    assert.throws(() => voucherDigest(8453, `0x${'00'.repeat(32)}`, 1n << 128n));
  });

  describe('what the unmodified client signs', function () {
    let deposit: BatchSettlementPayment;
    let second: BatchSettlementPayment;
    let third: BatchSettlementPayment;
    let refund: BatchSettlementPayment;
    let partialRefund: BatchSettlementPayment;

    before(async function () {
      const payer = batchPayer(PAYER_KEY);
      deposit = await payer.pay(terms);
      const channelId = deposit.payload.voucher.channelId;
      await payer.record(channelId, { balance: 10_000n, charged: 1_000n });
      second = await payer.pay(terms);
      await payer.record(channelId, { balance: 10_000n, charged: 2_000n });
      third = await payer.pay(terms);
      // A full refund ends the client's channel record, so the partial one goes first.
      partialRefund = await payer.refund(terms, 3_000n);
      refund = await payer.refund(terms);
    });

    it('a deposit of the announced minimum with the first voucher, through the ERC-3009 collector', async function () {
      assert.equal(deposit.payload.type, 'deposit');
      assert.equal(deposit.payload.type === 'deposit' && deposit.payload.deposit.amount, '10000');
      assert.equal(deposit.payload.voucher.maxClaimableAmount, '1000');
      const verified = await verifyDeposit(deposit.payload as never, depositExpectation(), fresh);
      assert.ok(verified.ok, verified.ok ? '' : verified.cause);
      assert.equal(verified.payer, new Wallet(PAYER_KEY).address);
      assert.equal(verified.amount, 10_000n);
      assert.equal(verified.channelId, channelIdOf(8453, deposit.payload.channelConfig));
    });

    it('later calls: cumulative vouchers on the same channel', async function () {
      assert.equal(second.payload.type, 'voucher');
      assert.equal(second.payload.voucher.maxClaimableAmount, '2000');
      assert.equal(third.payload.voucher.maxClaimableAmount, '3000');
      assert.equal(second.payload.voucher.channelId, deposit.payload.voucher.channelId);
      const state = { balance: 10_000n, totalClaimed: 0n, chargedCumulativeAmount: 1_000n };
      const verified = await verifyVoucher(second.payload, voucherExpectation(), state);
      assert.ok(verified.ok);
      assert.equal(verified.maxClaimableAmount, 2_000n);
      assert.equal(verified.signer, 'eoa');
    });

    it('a refund: a zero-charge voucher at the charged total, with or without an amount', async function () {
      assert.equal(refund.payload.type, 'refund');
      assert.equal(refund.payload.type === 'refund' && refund.payload.amount, undefined);
      assert.equal(partialRefund.payload.type === 'refund' && partialRefund.payload.amount, '3000');
      const state = { balance: 10_000n, totalClaimed: 2_000n, chargedCumulativeAmount: 2_000n };
      assert.equal(refund.payload.voucher.maxClaimableAmount, '2000');
      assert.ok((await verifyVoucher(refund.payload, voucherExpectation({ ceiling: 0n }), state)).ok);
    });

    it('refuses a voucher whose terms differ from what was asked', async function () {
      const state = { balance: 10_000n, totalClaimed: 0n, chargedCumulativeAmount: 1_000n };
      const cases: [Partial<VoucherExpectation>, string][] = [
        [{ chainId: 84532 }, 'channel_id_mismatch'],
        [{ payTo: authorizer }, 'receiver_mismatch'],
        [{ receiverAuthorizer: payTo }, 'receiver_authorizer_mismatch'],
        [{ asset: payTo }, 'token_mismatch'],
        [{ withdrawDelay: 3600 }, 'withdraw_delay_mismatch'],
        [{ ceiling: 999n }, 'cumulative_amount_mismatch'],
      ];
      for (const [overrides, cause] of cases) {
        assert.deepEqual(await verifyVoucher(second.payload, voucherExpectation(overrides), state), {
          ok: false,
          cause: `invalid_batch_settlement_evm_${cause}`,
        });
      }
    });

    it('refuses an altered config, ceiling or signature, the high-s twin of a good signature or its v flipped, and a delay out of range', async function () {
      const state = { balance: 10_000n, totalClaimed: 0n, chargedCumulativeAmount: 1_000n };
      const refused = async (payload: BatchSettlementPayment['payload'], cause: string) =>
        assert.deepEqual(await verifyVoucher(payload, voucherExpectation(), state), {
          ok: false,
          cause: `invalid_batch_settlement_evm_${cause}`,
        });
      const salted = clone(second.payload);
      salted.channelConfig.salt = `0x${'01'.repeat(32)}`;
      await refused(salted, 'channel_id_mismatch');
      const raised = clone(second.payload);
      raised.voucher.maxClaimableAmount = '2001';
      await refused(raised, 'voucher_signature');
      const twin = clone(second.payload);
      twin.voucher.signature = highS(second.payload.voucher.signature);
      await refused(twin, 'voucher_signature');
      // The other recovery id names another key: the contract would not take it.
      const flipped = clone(second.payload);
      const v = flipped.voucher.signature.slice(130);
      flipped.voucher.signature = `${flipped.voucher.signature.slice(0, 130)}${v === '1b' ? '1c' : '1b'}`;
      await refused(flipped, 'voucher_signature');
      const outOfRange = clone(second.payload);
      outOfRange.channelConfig.withdrawDelay = 60;
      await refused(outOfRange, 'channel_id_mismatch');
      // Even a channel id that matches such a config: the contract takes no deposit for it.
      outOfRange.voucher.channelId = channelIdOf(8453, outOfRange.channelConfig);
      assert.deepEqual(await verifyVoucher(outOfRange, voucherExpectation({ withdrawDelay: undefined }), state), {
        ok: false,
        cause: 'invalid_batch_settlement_evm_withdraw_delay_out_of_range',
      });
    });

    it('refuses a voucher the escrow cannot cover or that claims nothing new', async function () {
      const cases: [bigint, bigint, string][] = [
        [0n, 0n, 'channel_not_found'],
        [1_999n, 0n, 'cumulative_exceeds_balance'],
        [9_000n, 2_000n, 'cumulative_below_claimed'],
      ];
      for (const [balance, totalClaimed, cause] of cases) {
        const state = { balance, totalClaimed, chargedCumulativeAmount: 1_000n };
        assert.deepEqual(await verifyVoucher(second.payload, voucherExpectation(), state), {
          ok: false,
          cause: `invalid_batch_settlement_evm_${cause}`,
        });
      }
    });

    it('refuses a deposit below the minimum, out of its window, or not the payer’s authorization', async function () {
      const cause = (name: string) => ({ ok: false, cause: `invalid_batch_settlement_evm_${name}` });
      const payload = deposit.payload as Extract<BatchSettlementPayment['payload'], { type: 'deposit' }>;
      assert.deepEqual(
        await verifyDeposit(payload, depositExpectation({ minDeposit: 10_001n }), fresh),
        cause('deposit_below_min_deposit'),
      );
      assert.deepEqual(
        await verifyDeposit(payload, depositExpectation({ now: Math.floor(Date.now() / 1000) + 400 }), fresh),
        cause('payload_authorization_valid_before'),
      );
      const more = clone(payload);
      more.deposit.amount = '20000';
      assert.deepEqual(
        await verifyDeposit(more, depositExpectation(), fresh),
        cause('receive_authorization_signature'),
      );
      const otherSalt = clone(payload);
      if ('erc3009Authorization' in otherSalt.deposit.authorization)
        otherSalt.deposit.authorization.erc3009Authorization.salt = `0x${'02'.repeat(32)}`;
      assert.deepEqual(
        await verifyDeposit(otherSalt, depositExpectation(), fresh),
        cause('receive_authorization_signature'),
      );
      const permit2 = clone(payload) as unknown as { deposit: { authorization: unknown } };
      permit2.deposit.authorization = {
        permit2Authorization: {
          from: payTo,
          permitted: { token, amount: '10000' },
          spender: payTo,
          nonce: '1',
          deadline: '1',
          witness: { channelId: payload.voucher.channelId },
          signature: payload.voucher.signature,
        },
      };
      assert.deepEqual(
        await verifyDeposit(permit2 as never, depositExpectation(), fresh),
        cause('erc3009_authorization_required'),
      );
    });
  });

  it('without a payer authorizer, asks the payer contract (ERC-1271); with one, only its key counts', async function () {
    const signerKey = new Wallet('0x4444444444444444444444444444444444444444444444444444444444444444');
    const wallet = '0x00000000000000000000000000000000000000aa';
    const config: ChannelConfig = {
      payer: wallet,
      payerAuthorizer: ZeroAddress,
      receiver: payTo,
      receiverAuthorizer: authorizer,
      token,
      withdrawDelay: 900,
      salt: `0x${'00'.repeat(32)}`,
    };
    const channelId = channelIdOf(8453, config);
    const signature = signerKey.signingKey.sign(voucherDigest(8453, channelId, 1_000n)).serialized;
    const payload = {
      type: 'voucher' as const,
      channelConfig: config,
      voucher: { channelId, maxClaimableAmount: '1000', signature },
    };
    const state = { balance: 5_000n, totalClaimed: 0n, chargedCumulativeAmount: 0n };
    const asked: string[] = [];
    const contracts = async (who: string) => {
      asked.push(who);
      return true;
    };
    const verified = await verifyVoucher(payload, voucherExpectation(), state, contracts);
    assert.ok(verified.ok);
    assert.equal(verified.signer, 'contract');
    assert.deepEqual(asked, [getAddress(wallet)]);
    assert.deepEqual(await verifyVoucher(payload, voucherExpectation(), state), {
      ok: false,
      cause: 'invalid_batch_settlement_evm_voucher_signature',
    });

    const delegated = { ...config, payerAuthorizer: signerKey.address };
    const delegatedId = channelIdOf(8453, delegated);
    const delegatedPayload = {
      type: 'voucher' as const,
      channelConfig: delegated,
      voucher: {
        channelId: delegatedId,
        maxClaimableAmount: '1000',
        signature: new Wallet(PAYER_KEY).signingKey.sign(voucherDigest(8453, delegatedId, 1_000n)).serialized,
      },
    };
    asked.length = 0;
    assert.deepEqual(await verifyVoucher(delegatedPayload, voucherExpectation(), state, contracts), {
      ok: false,
      cause: 'invalid_batch_settlement_evm_voucher_signature',
    });
    assert.deepEqual(asked, []);
  });

  it('checks a claim row: our token and receiver authorizer, a total within the ceiling, the voucher signed', async function () {
    const payer = batchPayer(PAYER_KEY);
    const deposit = await payer.pay(terms);
    const { channelConfig: channel, voucher } = deposit.payload;
    const row = {
      voucher: { channel, maxClaimableAmount: voucher.maxClaimableAmount },
      signature: voucher.signature,
      totalClaimed: voucher.maxClaimableAmount,
    };
    const expect = { chainId: 8453, asset: token, receiverAuthorizer: authorizer };
    assert.deepEqual(await verifyClaimRow(row, expect), {
      ok: true,
      channelId: voucher.channelId.toLowerCase(),
      totalClaimed: 1_000n,
      receiver: payTo,
    });
    const refused = async (changed: typeof row, e = expect) => {
      const result = await verifyClaimRow(changed, e);
      assert.ok(!result.ok);
      return result.cause;
    };
    assert.equal(await refused({ ...row, totalClaimed: '1001' }), 'invalid_batch_settlement_evm_claim_payload');
    assert.equal(
      await refused(row, { ...expect, receiverAuthorizer: payTo }),
      'invalid_batch_settlement_evm_receiver_authorizer_mismatch',
    );
    assert.equal(await refused(row, { ...expect, asset: payTo }), 'invalid_batch_settlement_evm_token_mismatch');
    // The ceiling raised above what the payer signed, or the signature's high-s twin.
    assert.equal(
      await refused({ ...row, voucher: { channel, maxClaimableAmount: '2000' } }),
      'invalid_batch_settlement_evm_voucher_signature',
    );
    assert.equal(
      await refused({ ...row, signature: highS(row.signature) }),
      'invalid_batch_settlement_evm_voucher_signature',
    );
  });

  it("parses the facilitator's settle payloads and tells the same request by value, whatever its keys' order", async function () {
    const deposit = await batchPayer(PAYER_KEY).pay(terms);
    const envelope = (payload: unknown) => ({
      x402Version: 2,
      paymentPayload: { x402Version: 2, accepted: deposit.accepted, payload },
      paymentRequirements: { ...deposit.accepted, extra: { receiverAuthorizer: authorizer, withdrawDelay: 900 } },
    });
    const parsed = parseBatchSettleRequest(envelope(deposit.payload));
    assert.equal(parsed?.action.type, 'deposit');
    assert.equal(parsed?.receiverAuthorizer, authorizer);
    assert.equal(parsed?.withdrawDelay, 900);
    const settle = parseBatchSettleRequest(envelope({ type: 'settle', receiver: payTo, token }));
    assert.deepEqual(settle?.action, { type: 'settle', receiver: payTo, token });
    // A server's own authorizer signature is dropped: this facilitator signs.
    const row = {
      voucher: { channel: deposit.payload.channelConfig, maxClaimableAmount: '1000' },
      signature: deposit.payload.voucher.signature,
      totalClaimed: '1000',
    };
    const claim = parseBatchSettleRequest(
      envelope({ type: 'claim', claims: [row], claimAuthorizerSignature: `0x${'1b'.repeat(65)}` }),
    );
    assert.deepEqual(claim?.action, { type: 'claim', claims: [row] });
    assert.equal(parseBatchSettleRequest(envelope({ type: 'claim', claims: [] })), null);
    assert.equal(parseBatchSettleRequest(envelope({ ...deposit.payload, type: 'voucher' })), null);
    assert.equal(parseBatchSettleRequest({ ...envelope(deposit.payload), x402Version: 1 }), null);

    // As jsonb gives a stored request back: every object's keys in another order.
    const reorder = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(reorder)
        : value && typeof value === 'object'
          ? Object.fromEntries(
              Object.entries(value)
                .reverse()
                .map(([k, v]) => [k, reorder(v)]),
            )
          : value;
    const stored = reorder(claim) as NonNullable<typeof claim>;
    assert.notEqual(JSON.stringify(stored), JSON.stringify(claim));
    assert.ok(sameSettlement(claim!, stored));
    assert.ok(
      !sameSettlement(claim!, { ...claim!, action: { type: 'claim', claims: [{ ...row, totalClaimed: '999' }] } }),
    );
  });
});
