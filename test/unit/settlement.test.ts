// The settlement steps' pure decisions (facilitator/settlement/, facilitator/store/,
// facilitator/chain.ts): what a stored record answers, what a mined transaction makes of it,
// whether stored bytes are a cancel, the settlement key that makes one authorization one
// settlement, the guardrails an account's own limits decide, and which token entry point the
// transfer calls, what the token's word on an authorization is when the node cannot give it
// yet, and when a cancelled transfer may be submitted again. Signing is local with an ethers
// Wallet; no chain (the node is a stand-in RPC answering ethers' own JSON-RPC transport).
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  JsonRpcProvider,
  Transaction,
  Wallet,
  getAddress,
  hexlify,
  toBeHex,
  toQuantity,
  zeroPadValue,
  type JsonRpcPayload,
  type JsonRpcResult,
} from 'ethers';
import { outcomeOfRecord } from '../../facilitator/settlement/verify.ts';
import { isCancelRaw, signedOrThrow } from '../../facilitator/settlement/signed.ts';
import { mayResubmit } from '../../facilitator/settlement/resubmit.ts';
import { outcomeOfInclusion } from '../../facilitator/settlement/inclusion.ts';
import { parseSettlementKey, settlementKey, type SettlementRecord } from '../../facilitator/store/records.ts';
import { staticGuardrail } from '../../facilitator/store/reservations.ts';
import { authorizationUse, signedTransactionHash, tokenInterface, transferCalldata } from '../../facilitator/chain.ts';
import type { Account } from '../../facilitator/accounts.ts';

const gasWallet = new Wallet('0x' + '55'.repeat(32));
const TOKEN = getAddress('0x833589fcd6edb6e08f4c7c32d4f71b54bda02913');
const PAYER = getAddress('0x' + '66'.repeat(20));
const HASH = '0x' + 'AB'.repeat(32);

function record(over: Partial<SettlementRecord> = {}): SettlementRecord {
  return {
    id: 'stl_1',
    key: settlementKey(8453, TOKEN, PAYER, '0x' + '01'.repeat(32)),
    accountId: 'acct_1',
    payer: PAYER.toLowerCase(),
    payTo: getAddress('0x' + '77'.repeat(20)),
    amount: 1000n,
    validBefore: 1_800_000_600n,
    status: 'pending',
    failureCause: null,
    gasNonce: 3,
    txHash: HASH,
    rawTx: '0x02',
    blockNumber: null,
    attempts: 1,
    ownGas: false,
    ...over,
  };
}

const mined = (over: { success?: boolean; cancelled?: boolean } = {}) => ({
  mined: true as const,
  success: true,
  blockNumber: 10,
  gasUsed: 50_000n,
  gasPrice: 1n,
  txHash: HASH,
  cancelled: false,
  ...over,
});

describe('settlement decisions', () => {
  it('answers a stored record: settled, failed or still pending, payer checksummed, transaction in lowercase', () => {
    assert.deepEqual(outcomeOfRecord(record({ status: 'settled' })), {
      status: 'settled',
      payer: PAYER,
      transaction: HASH.toLowerCase(),
      cause: null,
    });
    assert.deepEqual(outcomeOfRecord(record({ status: 'failed', failureCause: 'reverted' })), {
      status: 'failed',
      payer: PAYER,
      transaction: HASH.toLowerCase(),
      cause: 'reverted',
    });
    for (const status of ['pending', 'claimed', 'signed', 'broadcast'] as SettlementRecord['status'][])
      assert.equal(outcomeOfRecord(record({ status })).status, 'pending', status);
    assert.equal(outcomeOfRecord(record({ txHash: null })).transaction, null);
  });

  it('gives no transaction for a transfer cancelled at the inclusion timeout (the hash is the cancel’s)', () => {
    assert.deepEqual(outcomeOfRecord(record({ status: 'failed', failureCause: 'inclusion_timeout' })), {
      status: 'failed',
      payer: PAYER,
      transaction: null,
      cause: 'inclusion_timeout',
    });
  });

  // A revert is not answered early: the token is asked first whether someone else's use of the
  // authorization paid this settlement (facilitator/settlement/outcome.ts), so only a successful transfer has an outcome here.
  it('makes a mined, successful transfer settled before the record is written', () => {
    assert.deepEqual(outcomeOfInclusion(record(), mined()), {
      status: 'settled',
      payer: PAYER,
      transaction: HASH.toLowerCase(),
      cause: null,
    });
  });

  it('refuses to deliver a record with no signed bytes stored', () => {
    assert.throws(() => signedOrThrow(null), /no signed transaction/);
    assert.throws(() => signedOrThrow(record({ rawTx: null })), /no signed transaction/);
    assert.throws(() => signedOrThrow(record({ txHash: null })), /no signed transaction/);
    const r = record();
    assert.equal(signedOrThrow(r), r);
  });

  it('tells a cancel (the gas wallet paying itself) from a transfer by the signed bytes', async () => {
    const sign = (to: string) =>
      gasWallet.signTransaction(
        Transaction.from({
          type: 2,
          chainId: 8453,
          nonce: 3,
          to,
          value: 0n,
          data: to === TOKEN ? '0xe3ee160e' : '0x',
          gasLimit: 21_000n,
          maxFeePerGas: 2n,
          maxPriorityFeePerGas: 1n,
        }),
      );
    assert.equal(isCancelRaw(await sign(gasWallet.address)), true);
    assert.equal(isCancelRaw(await sign(TOKEN)), false);
  });

  it('keys a settlement by chain, token, payer and nonce, whatever their case, and reads the key back', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.uint8Array({ minLength: 20, maxLength: 20 }),
        fc.uint8Array({ minLength: 20, maxLength: 20 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (chainId, token, payer, nonce) => {
          const t = getAddress(hexlify(token));
          const p = getAddress(hexlify(payer));
          const n = hexlify(nonce);
          const key = settlementKey(chainId, t, p, n);
          assert.equal(
            settlementKey(chainId, t.toLowerCase(), p.toLowerCase(), n.toUpperCase().replace('0X', '0x')),
            key,
          );
          assert.deepEqual(parseSettlementKey(key), {
            chainId,
            token: t.toLowerCase(),
            payer: p.toLowerCase(),
            nonce: n.toLowerCase(),
          });
        },
      ),
    );
    // Another nonce, payer, token or chain is another settlement.
    const key = settlementKey(8453, TOKEN, PAYER, '0x' + '01'.repeat(32));
    assert.notEqual(settlementKey(8453, TOKEN, PAYER, '0x' + '02'.repeat(32)), key);
    assert.notEqual(settlementKey(84532, TOKEN, PAYER, '0x' + '01'.repeat(32)), key);
    assert.notEqual(settlementKey(8453, PAYER, TOKEN, '0x' + '01'.repeat(32)), key);
  });

  describe('guardrails decided by the account and the amount alone', () => {
    const kind = { network: 'base', asset: TOKEN };
    const account = (over: Partial<Account> = {}): Account => ({
      id: 'acct_1',
      name: 'a',
      certFingerprint: 'f',
      allowedKinds: [kind],
      maxPerTx: null,
      dailyCeiling: null,
      active: true,
      createdAt: new Date(0),
      deactivatedAt: null,
      ...over,
    });
    const defaults = { maxPerTx: 1_000n, dailyCeiling: 5_000n, failedGasDailyWei: 1n };
    const judge = (amount: bigint, over: Partial<Account> = {}, k = kind) =>
      staticGuardrail({ account: account(over), kind: k, amount, defaults });

    it('refuses a kind the account may not settle, the asset compared in any case', () => {
      assert.equal(judge(1n, {}, { network: 'base', asset: TOKEN.toLowerCase() }), null);
      assert.equal(judge(1n, {}, { network: 'base-sepolia', asset: TOKEN }), 'kind_not_allowed');
      assert.equal(judge(1n, {}, { network: 'base', asset: PAYER }), 'kind_not_allowed');
      assert.equal(judge(1n, { allowedKinds: [] }), 'kind_not_allowed');
    });

    it('holds an amount to the account’s per-transaction maximum and ceiling, else the defaults', () => {
      assert.equal(judge(1_000n), null);
      assert.equal(judge(1_001n), 'over_per_transaction_maximum');
      assert.equal(judge(2_000n, { maxPerTx: 2_000n }), null);
      assert.equal(judge(11n, { maxPerTx: 10n }), 'over_per_transaction_maximum');
      assert.equal(judge(6_000n, { maxPerTx: 10_000n }), 'over_daily_ceiling');
      assert.equal(judge(6_000n, { maxPerTx: 10_000n, dailyCeiling: 6_000n }), null);
      // A kind it may not settle is refused before any amount is looked at.
      assert.equal(judge(10n ** 30n, { allowedKinds: [] }), 'kind_not_allowed');
    });
  });

  describe('the transfer’s calldata', () => {
    const authorization = {
      from: PAYER,
      to: getAddress('0x' + '77'.repeat(20)),
      value: '1000',
      validAfter: '0',
      validBefore: '1800000600',
      nonce: '0x' + '01'.repeat(32),
    };
    const EOA = 'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)';
    const CONTRACT = 'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)';

    it('calls the (v, r, s) entry point for an EOA and the bytes one for a contract wallet, with the signed terms', async () => {
      const signature = await gasWallet.signMessage('any 65-byte signature');
      const eoa = tokenInterface.parseTransaction({ data: transferCalldata(authorization, signature, 'eoa') })!;
      assert.equal(eoa.signature, EOA);
      assert.deepEqual(eoa.args.slice(0, 6).map(String), [
        authorization.from,
        authorization.to,
        '1000',
        '0',
        '1800000600',
        authorization.nonce,
      ]);
      const contract = tokenInterface.parseTransaction({
        data: transferCalldata(authorization, signature, 'contract'),
      })!;
      assert.equal(contract.signature, CONTRACT);
      assert.equal(contract.args[6], signature);
      // Unverified: by length, 65 bytes taken for an EOA's.
      assert.equal(
        tokenInterface.parseTransaction({ data: transferCalldata(authorization, signature) })!.signature,
        EOA,
      );
      const long = signature + 'ab'.repeat(20);
      assert.equal(
        tokenInterface.parseTransaction({ data: transferCalldata(authorization, long) })!.signature,
        CONTRACT,
      );
    });

    it('encodes each term: a transfer differing in one term only is encoded afresh, not taken from an earlier one', async () => {
      const signature = await gasWallet.signMessage('any 65-byte signature');
      for (const change of [
        { value: '1001' },
        { to: getAddress('0x' + '78'.repeat(20)) },
        { nonce: '0x' + '02'.repeat(32) },
      ]) {
        const changed = { ...authorization, ...change };
        const args = tokenInterface.parseTransaction({ data: transferCalldata(changed, signature, 'eoa') })!.args;
        assert.deepEqual(args.slice(0, 6).map(String), [
          changed.from,
          changed.to,
          changed.value,
          '0',
          '1800000600',
          changed.nonce,
        ]);
      }
    });

    it('names a signed transaction by the keccak of its bytes, as parsing it would', async () => {
      const raw = await gasWallet.signTransaction({
        type: 2,
        chainId: 8453,
        to: getAddress('0x' + '77'.repeat(20)),
        data: transferCalldata(authorization, await gasWallet.signMessage('x'), 'eoa'),
        nonce: 7,
        gasLimit: 150_000n,
        maxFeePerGas: 2_000_000_000n,
        maxPriorityFeePerGas: 1_000_000n,
        value: 0n,
      });
      assert.equal(signedTransactionHash(raw), Transaction.from(raw).hash);
    });
  });

  describe('the token’s word on an authorization, from a node that is behind or inconsistent', () => {
    const NONCE = '0x' + '01'.repeat(32);
    const PAY_TO = getAddress('0x' + '77'.repeat(20));
    const USE_TX = '0x' + 'cd'.repeat(32);
    const REVERT_BLOCK = 120;
    const settlement = { payer: PAYER, nonce: NONCE, payTo: PAY_TO, amount: 1000n };
    const topic = (event: string) => tokenInterface.getEvent(event)!.topicHash;
    const log = (index: number, topics: string[], data = '0x') => ({
      address: TOKEN,
      topics,
      data,
      blockNumber: toQuantity(REVERT_BLOCK),
      blockHash: '0x' + 'ee'.repeat(32),
      transactionHash: USE_TX,
      transactionIndex: '0x0',
      logIndex: toQuantity(index),
      removed: false,
    });
    const usedLog = log(0, [topic('AuthorizationUsed'), zeroPadValue(PAYER, 32), NONCE]);
    const transferLog = log(
      1,
      [topic('Transfer'), zeroPadValue(PAYER, 32), zeroPadValue(PAY_TO, 32)],
      toBeHex(1000n, 32),
    );

    /**
     * Stand-in for a load-balanced RPC (no node here can lag on purpose): eth_call is answered by
     * a node whose head is `callHead` (a block above it: "header not found", as geth answers; at
     * `latest`: the state at its own head), eth_getLogs by a node that has the use at
     * REVERT_BLOCK, eth_getTransactionReceipt by `receipt`.
     */
    class StandInRpc extends JsonRpcProvider {
      calls: unknown[] = [];
      readonly callHead: number;
      readonly receipt: object | null;
      constructor(callHead: number, receipt: object | null) {
        super('http://stand-in.invalid', 8453, { staticNetwork: true, cacheTimeout: -1, batchMaxCount: 1 });
        this.callHead = callHead;
        this.receipt = receipt;
      }
      override async _send(payload: JsonRpcPayload | JsonRpcPayload[]): Promise<JsonRpcResult[]> {
        return (Array.isArray(payload) ? payload : [payload]).map((p) => this.answer(p));
      }
      private answer({ id, method, params }: JsonRpcPayload): JsonRpcResult {
        const args = params as unknown[];
        switch (method) {
          case 'eth_call': {
            this.calls.push(args[1]);
            const block = args[1] === 'latest' ? this.callHead : Number(args[1]);
            if (block > this.callHead) return { id, error: { code: -32000, message: 'header not found' } } as never;
            const used = block >= REVERT_BLOCK;
            return { id, result: tokenInterface.encodeFunctionResult('authorizationState', [used]) };
          }
          case 'eth_getLogs':
            return {
              id,
              result: Number((args[0] as { toBlock: string }).toBlock) >= REVERT_BLOCK ? [usedLog] : [],
            } as never;
          case 'eth_getTransactionReceipt':
            return { id, result: this.receipt } as never;
          default:
            return { id, error: { code: -32601, message: `the stand-in has no ${method}` } } as never;
        }
      }
    }
    const receiptOf = (logs: object[]) => ({
      transactionHash: USE_TX,
      transactionIndex: '0x0',
      blockHash: '0x' + 'ee'.repeat(32),
      blockNumber: toQuantity(REVERT_BLOCK),
      from: getAddress('0x' + '88'.repeat(20)),
      to: TOKEN,
      contractAddress: null,
      cumulativeGasUsed: '0x1',
      gasUsed: '0x1',
      effectiveGasPrice: '0x1',
      logsBloom: '0x' + '00'.repeat(256),
      status: '0x1',
      type: '0x2',
      logs,
    });

    it('settles a use whose Transfer paid this settlement, reading the state at the block in question', async () => {
      const rpc = new StandInRpc(REVERT_BLOCK, receiptOf([usedLog, transferLog]));
      try {
        assert.deepEqual(await authorizationUse(rpc, TOKEN, settlement, REVERT_BLOCK), {
          used: true,
          paid: { txHash: USE_TX, blockNumber: REVERT_BLOCK },
        });
        assert.deepEqual(rpc.calls, [toQuantity(REVERT_BLOCK)]);
      } finally {
        rpc.destroy();
      }
    });

    it('throws (not known yet) when the log is there but its receipt is not, never "used, paid nothing"', async () => {
      const rpc = new StandInRpc(REVERT_BLOCK, null);
      try {
        await assert.rejects(authorizationUse(rpc, TOKEN, settlement, REVERT_BLOCK), /no receipt/);
      } finally {
        rpc.destroy();
      }
    });

    it('throws (not known yet) when the node answering eth_call is behind the block whose logs have the use, never "unused"', async () => {
      const rpc = new StandInRpc(REVERT_BLOCK - 1, receiptOf([usedLog, transferLog]));
      try {
        // ethers reports the node's error as a CALL_EXCEPTION without data; thrown all the same.
        await assert.rejects(authorizationUse(rpc, TOKEN, settlement, REVERT_BLOCK));
        assert.deepEqual(rpc.calls, [toQuantity(REVERT_BLOCK)], 'asked as of the block, not at the node’s head');
      } finally {
        rpc.destroy();
      }
    });
  });

  describe('submitting a cancelled transfer again', () => {
    const config = { inclusionTimeoutMs: 15_000, validityMarginSeconds: 6 };
    const NOW = 1_800_000_000;

    it('only while the authorization outlives a whole inclusion timeout plus the validity margin', () => {
      assert.equal(mayResubmit(config, NOW, BigInt(NOW + 22)), true);
      assert.equal(mayResubmit(config, NOW, BigInt(NOW + 21)), false);
      // Past the margin alone, but the re-submitted transfer could stall a whole timeout and land after validBefore.
      assert.equal(mayResubmit(config, NOW, BigInt(NOW + 10)), false);
      assert.equal(mayResubmit(config, NOW, BigInt(NOW)), false);
      assert.equal(mayResubmit({ ...config, inclusionTimeoutMs: 1_500 }, NOW, BigInt(NOW + 9)), true);
      assert.equal(mayResubmit({ ...config, inclusionTimeoutMs: 1_500 }, NOW, BigInt(NOW + 8)), false);
    });
  });
});
