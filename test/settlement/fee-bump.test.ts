// Fee bumping on the real stack: with mining switched off, a broadcast settlement is not
// included, so the workflow re-signs the SAME gas nonce with fees raised by at least 12.5 %
// (each attempt stored before it is sent), then, once a block is mined, the attempt that was
// included is the settlement's transaction: one transfer, one gas nonce, every attempt recorded.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { Transaction, Wallet, hexlify, type JsonRpcProvider } from 'ethers';
import { stack } from '../support/stack.ts';
import { finalRecord, until, type FacilitatorStack } from '../support/facilitator.ts';
import { withOwnFacilitator } from '../support/settling.ts';
import {
  balanceOf,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { signedAttempts, storeFeeBump } from '../../facilitator/store/gas.ts';
import { findSettlement, parseSettlementKey, settlementKey } from '../../facilitator/store/records.ts';

describe('fee bumping of a stuck settlement transaction', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let gateway: TestAccount;
  let facilitator: FacilitatorStack;
  withOwnFacilitator(
    'fee-bump',
    {
      FACILITATOR_FEE_BUMP_AFTER_MS: '700',
      FACILITATOR_FEE_BUMP_PERCENT: '20',
      FACILITATOR_MAX_FEE_BUMPS: '3',
      FACILITATOR_SETTLE_DEADLINE_MS: '20000',
      FACILITATOR_INCLUSION_TIMEOUT_MS: '15000',
    },
    (own) => ({ provider, gateway, facilitator } = own),
  );

  it('re-signs the same gas nonce with higher fees until one attempt is mined: one transfer, attempts recorded', async () => {
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, {
      payTo,
      value: 40_000n,
      validBefore: Math.floor(Date.now() / 1000) + 300,
    });
    const key = settlementKey(8453, stack().infra.tokenAddress, payer.address, payment.payload.authorization.nonce);
    const gasNonceBefore = await provider.getTransactionCount(facilitator.gasWallet, 'latest');

    await provider.send('evm_setAutomine', [false]);
    let answer;
    try {
      const inFlight = gateway.client.post(
        '/settle',
        settleBody(payment, requirements(payTo, 40_000n)),
        facilitator.url,
      );
      // Two bumps stored (three attempts), the latest one held by the node in place of the others.
      const attempts = await until('two fee bumps', async () => {
        const stored = await signedAttempts(facilitator.pool, key);
        return stored.length >= 3 ? stored : null;
      });
      const latest = await until('the node holding the latest bump', async () =>
        (await provider.getTransaction(attempts[2].txHash)) ? true : null,
      );
      assert.ok(latest);
      assert.equal(
        await provider.getTransaction(attempts[0].txHash),
        null,
        'the first attempt was replaced in the pool',
      );

      const txs = attempts.map((a) => Transaction.from(a.rawTx));
      for (let i = 1; i < txs.length; i++) {
        assert.equal(txs[i].nonce, txs[0].nonce, 'every attempt re-signs the same gas nonce');
        assert.equal(txs[i].data, txs[0].data, 'the same transfer');
        assert.ok(
          txs[i].maxFeePerGas! * 1000n >= txs[i - 1].maxFeePerGas! * 1125n,
          'maxFeePerGas raised by at least 12.5 %',
        );
        assert.ok(
          txs[i].maxPriorityFeePerGas! * 1000n >= txs[i - 1].maxPriorityFeePerGas! * 1125n,
          'maxPriorityFeePerGas raised by at least 12.5 %',
        );
      }
      assert.equal(txs[0].nonce, gasNonceBefore);

      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      answer = await inFlight;
    } finally {
      await provider.send('evm_setAutomine', [true]);
    }

    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.equal(answer.json.success, true, JSON.stringify(answer.json));
    const all = await signedAttempts(facilitator.pool, key);
    const mined = all.find((a) => a.txHash === answer.json.transaction);
    assert.ok(mined, 'the answer is one of the stored attempts');
    assert.ok(mined.seq >= 1, `a bump was mined, not the first attempt (seq ${mined.seq})`);
    assert.equal((await provider.getTransactionReceipt(mined.txHash))?.status, 1);
    for (const other of all.filter((a) => a !== mined))
      assert.equal(await provider.getTransactionReceipt(other.txHash), null);

    assert.deepEqual(
      await transfersTo(provider, payTo),
      [{ hash: mined.txHash, value: 40_000n }],
      'exactly one transfer',
    );
    assert.equal(await balanceOf(provider, payTo), 40_000n);
    assert.equal(
      await provider.getTransactionCount(facilitator.gasWallet, 'latest'),
      gasNonceBefore + 1,
      'one gas nonce used',
    );

    const record = await finalRecord(facilitator.pool, key);
    assert.equal(record?.status, 'settled');
    assert.equal(record?.txHash, mined.txHash, 'the record names the attempt that was mined');
    assert.equal(record?.rawTx, mined.rawTx);
    assert.equal(record?.gasNonce, gasNonceBefore);
    assert.ok(
      record!.attempts >= all.length,
      `every attempt was sent (attempts ${record?.attempts}, signed ${all.length})`,
    );
  });

  it('a bump signed at the gas nonce before a re-submission is not stored: the record keeps the submitted transfer', async () => {
    // A record as a re-submission leaves it: pending at its new gas nonce (8), while a watcher
    // still following the cancelled round (nonce 7) bumps what it saw. Signed by a wallet of the
    // test's own, at gas nonces no node will ever see (nothing is sent).
    const wallet = new Wallet(hexlify(randomBytes(32)));
    const signAt = (nonce: number, maxFeePerGas: bigint) =>
      wallet.signTransaction({
        type: 2,
        chainId: 8453,
        nonce,
        to: stack().infra.tokenAddress,
        data: '0xe3ee160e',
        gasLimit: 150_000n,
        maxFeePerGas,
        maxPriorityFeePerGas: 1n,
        value: 0n,
      });
    const payer = newPayTo();
    const key = settlementKey(8453, stack().infra.tokenAddress, payer, hexlify(randomBytes(32)));
    const current = await signAt(8, 10n);
    const currentHash = Transaction.from(current).hash!;
    await facilitator.pool.query(
      `insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount,
         valid_before, status, gas_wallet, gas_nonce, tx_hash, raw_tx)
       values ($1, $2, 8453, $3, $4, $5, $6, $7, 1, 1, 'pending', $8, 8, $9, $10)`,
      [
        `stl_${randomUUID()}`,
        key,
        stack().infra.tokenAddress.toLowerCase(),
        payer.toLowerCase(),
        parseSettlementKey(key).nonce,
        gateway.account.id,
        newPayTo(),
        wallet.address.toLowerCase(),
        currentHash,
        current,
      ],
    );
    const attempt = async (nonce: number, seq: number) => {
      const rawTx = await signAt(nonce, 20n);
      return { seq, txHash: Transaction.from(rawTx).hash!, rawTx, maxFeePerGas: 20n, maxPriorityFeePerGas: 1n };
    };

    assert.equal(await storeFeeBump(facilitator.pool, key, await attempt(7, 2)), null, 'the earlier round’s bump');
    let record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.txHash, currentHash, 'the re-submitted transfer stays the record’s');
    assert.equal(record?.rawTx, current);
    assert.deepEqual(await signedAttempts(facilitator.pool, key), []);

    // A bump of the current round is stored as before.
    const bump = await attempt(8, 2);
    assert.deepEqual(await storeFeeBump(facilitator.pool, key, bump), bump);
    record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.txHash, bump.txHash);
    assert.equal(record?.rawTx, bump.rawTx);
  });
});
