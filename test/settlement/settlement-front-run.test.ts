// Two ways a payer's authorization meets the chain other than through the facilitator's own
// transfer, on the real stack (anvil with mining paused so the order is the test's):
// - front-run: someone else submits the same transferWithAuthorization, with higher fees, in
//   the block that then reverts the facilitator's transfer. The payer's USDC moved (once), so
//   the settlement is settled with the front-runner's transaction, never `success: false`
//   (which would make the payer sign and pay again), and the gateway serves the call; but a
//   payer who spends the same nonce on another authorization has paid nothing for this one;
// - a stalled chain: the transfer is replaced by its cancel at the inclusion timeout and the
//   cancel is mined; the authorization is still valid and unused, so the transfer is submitted
//   again at a new gas nonce and settles: the payer is charged once, for the call it asked;
//   also when the worker dies between the cancel and its mining (its successor submits it);
// - a use after the revert: the facilitator's transfer reverts because the payer moved its
//   balance away, then the payer tops up and submits the same authorization itself before the
//   revert is recorded: settled with the payer's transaction, in bounded time (the token's
//   state and the log window end at the same block).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Transaction, Wallet, hexlify, randomBytes, parseEther, type JsonRpcProvider } from 'ethers';
import { stack } from '../support/stack.ts';
import {
  spawnFacilitatorWorker,
  startFacilitatorStack,
  until,
  type FacilitatorStack,
  type SpawnedWorker,
} from '../support/facilitator.ts';
import {
  balanceOf,
  newPayTo,
  newPayer,
  encodePayment,
  requirements,
  settleBody,
  settlingTenant,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { withOwnFacilitator } from '../support/settling.ts';
import { startUpstream } from '../support/upstream.ts';
import { fund, tokenContract } from '../../scripts/dev/chain.ts';
import type { ExactPayment as Payment } from '../../x402/schemes/exact/schemas.ts';
import { signedAttempts } from '../../facilitator/store/gas.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { isCancelRaw } from '../../facilitator/settlement/signed.ts';

describe('an authorization used outside the facilitator’s own transfer', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let gateway: TestAccount;
  let facilitator: FacilitatorStack;
  withOwnFacilitator(
    'front-run',
    {
      FACILITATOR_SETTLE_DEADLINE_MS: '15000',
      FACILITATOR_INCLUSION_TIMEOUT_MS: '2000',
      // No fee bump before the inclusion timeout: the pool holds exactly the test's order.
      FACILITATOR_FEE_BUMP_AFTER_MS: '0',
    },
    (own) => ({ provider, gateway, facilitator } = own),
  );

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  const gasNonce = () => provider.getTransactionCount(facilitator.gasWallet, 'latest');
  /** A fresh payer's signed payment of `value` to a fresh payTo (or `payTo`), with its settle body, key and the payer's balance. */
  async function newPayment(value: bigint, validInS = 300, payTo = newPayTo()) {
    const payer = await newPayer(1_000_000n);
    const validBefore = Math.floor(Date.now() / 1000) + validInS;
    const payment = await signPayment(payer, { payTo, value, validBefore });
    return {
      payer,
      payTo,
      payment,
      validBefore,
      body: settleBody(payment, requirements(payTo, value)),
      key: keyOf(payer.address, payment.payload.authorization.nonce),
      payerBefore: await balanceOf(provider, payer.address),
    };
  }

  /**
   * A facilitator whose worker runs in its own process, for a test to kill (`down`) and start
   * again (`up`) around what the chain does meanwhile.
   */
  function killableWorker(queue: string, inclusionTimeoutMs: number) {
    const killable = {
      stack: undefined as unknown as FacilitatorStack,
      worker: undefined as SpawnedWorker | undefined,
      async up() {
        killable.worker = spawnFacilitatorWorker(killable.stack.env);
        await killable.worker.ready;
      },
      async down() {
        killable.worker?.child.kill('SIGKILL');
        await killable.worker?.exited;
      },
    };
    before(async () => {
      killable.stack = await startFacilitatorStack(stack().infra, stack().temporal, {
        inProcessWorker: false,
        overrides: {
          FACILITATOR_TASK_QUEUE: queue,
          FACILITATOR_SETTLE_DEADLINE_MS: '4000',
          FACILITATOR_INCLUSION_TIMEOUT_MS: String(inclusionTimeoutMs),
          FACILITATOR_FEE_BUMP_AFTER_MS: '0',
        },
      });
    });
    after(async () => {
      await killable.down();
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await killable.stack.close();
    });
    return killable;
  }

  const failedGasToday = async () => {
    const { rows } = await facilitator.pool.query<{ wei: string }>(
      'select coalesce(sum(failed_gas_wei), 0)::text as wei from daily_usage where account_id = $1',
      [gateway.account.id],
    );
    return BigInt(rows[0].wei);
  };

  /**
   * Runs `settle` (a /settle, or a paid gateway call) with mining paused; once the
   * facilitator's transfer is in the node's pool, `submitted` (sent by a third party, far
   * higher fees) goes in too, and one block mines both: `submitted` first, so the
   * facilitator's transfer reverts on the used nonce.
   */
  async function frontRun<T>(settle: () => Promise<T>, key: string, submitted: Payment) {
    const frontRunner = new Wallet(hexlify(randomBytes(32)), provider);
    await provider.send('anvil_setBalance', [frontRunner.address, `0x${parseEther('1').toString(16)}`]);
    await provider.send('evm_setAutomine', [false]);
    try {
      const inFlight = settle();
      const sent = await until('the facilitator’s broadcast', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.txHash && (await provider.getTransaction(record.txHash)) ? record : null;
      });
      const ours = Transaction.from(sent.rawTx!);
      const a = submitted.payload.authorization;
      const tx = await tokenContract(stack().infra.tokenAddress, frontRunner)[
        'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)'
      ](a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, submitted.payload.signature, {
        gasLimit: 200_000n,
        maxPriorityFeePerGas: ours.maxPriorityFeePerGas! * 10n,
        maxFeePerGas: ours.maxFeePerGas! * 10n,
      });
      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      const theirs = await tx.wait();
      const revert = await provider.getTransactionReceipt(sent.txHash!);
      assert.equal(theirs?.status, 1, 'the front-run used the authorization');
      assert.equal(revert?.status, 0, 'the facilitator’s transfer reverted');
      assert.equal(revert?.blockNumber, theirs?.blockNumber, 'in the same block, after the front-run');
      return { answer: await inFlight, frontRun: tx.hash, revert: revert! };
    } finally {
      await provider.send('evm_setAutomine', [true]);
    }
  }

  it('front-run: the facilitator’s transfer reverts because another submitter used the authorization first; settled with that transaction, the payer charged once', async () => {
    const { payer, payTo, payment, body, key, payerBefore } = await newPayment(45_000n);
    const gasBefore = await failedGasToday();

    const {
      answer,
      frontRun: theirs,
      revert,
    } = await frontRun(() => gateway.client.post('/settle', body, facilitator.url), key, payment);
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.equal(answer.json.success, true, JSON.stringify(answer.json));
    assert.equal(answer.json.transaction, theirs, 'the transaction that moved the payer’s money');
    assert.equal(await balanceOf(provider, payer.address), payerBefore - 45_000n, 'the payer charged once');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: theirs, value: 45_000n }]);
    const record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.status, 'settled');
    assert.equal(record?.txHash, theirs);
    // A retry of the same payment (the gateway's resume) gets the same answer.
    const again = await gateway.client.post('/settle', body, facilitator.url);
    assert.equal(again.json.success, true);
    assert.equal(again.json.transaction, theirs);
    assert.equal(
      (await failedGasToday()) - gasBefore,
      revert.gasUsed * revert.gasPrice,
      'the revert’s gas is charged to the account’s failed-gas budget',
    );
  });

  it('through the gateway: a front-run paid call is served once, with the front-runner’s transaction in X-PAYMENT-RESPONSE', async () => {
    const upstream = await startUpstream();
    try {
      const token = await settlingTenant(`tenant-front-run-${randomUUID()}`, gateway, facilitator.url);
      const payTo = newPayTo();
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('priced-front-run'),
          upstream_url: upstream.url,
          pricing: { amount: '25000', asset: 'USDC', network: 'base', pay_to: payTo },
        },
      });
      assert.equal(created.status, 201, created.text);
      const { payer, payment, key, payerBefore } = await newPayment(25_000n, 300, payTo);
      const marker = `front-run ${randomUUID()}`;

      const { answer, frontRun: theirs } = await frontRun(
        () =>
          call('POST', `/v1/proxy/${created.json.id}`, {
            token,
            body: marker,
            headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
          }),
        key,
        payment,
      );
      assert.equal(answer.status, 202, answer.text);
      const receipt = JSON.parse(Buffer.from(String(answer.headers['x-payment-response']), 'base64').toString());
      assert.equal(receipt.success, true);
      assert.equal(receipt.transaction, theirs);
      const done = await waitForInvocation(token, created.json.id, answer.json.invocation_id);
      assert.equal(done.status, 'succeeded');
      assert.equal(done.payment_transaction, theirs);
      assert.equal(upstream.received.filter((r) => r.body.toString().includes(marker)).length, 1, 'served once');
      assert.equal(await balanceOf(provider, payer.address), payerBefore - 25_000n, 'the payer charged once');
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: theirs, value: 25_000n }]);
    } finally {
      await upstream.close();
    }
  });

  it('the payer spends the same nonce on another authorization first: the facilitator’s transfer reverts and nothing was collected for this payment, so success false', async () => {
    const { payer, payTo, payment, validBefore, body, key } = await newPayment(65_000n);
    const nonce = payment.payload.authorization.nonce;
    // Same payer, same nonce, 1 unit to an address of its own: the nonce is used, the payee unpaid.
    const decoy = await signPayment(payer, { payTo: newPayTo(), value: 1n, validBefore, nonce });

    const { answer, revert } = await frontRun(() => gateway.client.post('/settle', body, facilitator.url), key, decoy);
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.equal(answer.json.success, false, 'not collected: the call must not be served');
    assert.equal(answer.json.errorReason, 'settlement_failed');
    assert.equal(answer.json.transaction, revert.hash);
    assert.deepEqual(await transfersTo(provider, payTo), []);
    const record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.status, 'failed');
    assert.equal(record?.failureCause, 'reverted');
  });

  it('a stalled chain: the transfer is cancelled at the inclusion timeout, the cancel is mined, and the transfer is submitted again and settles; the payer charged once', async () => {
    const { payer, payTo, body, key, payerBefore } = await newPayment(55_000n, 120);
    const nonceBefore = await gasNonce();

    await provider.send('evm_setAutomine', [false]);
    let first;
    try {
      const inFlight = gateway.client.post('/settle', body, facilitator.url);
      // The chain stalls past the inclusion timeout: the transfer is replaced by its cancel.
      const cancel = await until('the cancel in the pool', async () => {
        const attempts = await signedAttempts(facilitator.pool, key);
        const latest = attempts[attempts.length - 1];
        return latest && isCancelRaw(latest.rawTx) && (await provider.getTransaction(latest.txHash)) ? latest : null;
      });
      // The chain moves again: the cancel lands first.
      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      assert.equal((await provider.getTransactionReceipt(cancel.txHash))?.status, 1, 'the cancel was mined');
      first = await inFlight;
    } finally {
      await provider.send('evm_setAutomine', [true]);
    }
    // The caller got the settlement, or a 503 whose retry with the same payment gets it.
    const settled =
      first.status === 200
        ? first
        : await until('the settled answer', async () => {
            const res = await gateway.client.post('/settle', body, facilitator.url);
            return res.status === 200 ? res : null;
          });
    assert.equal(settled.json.success, true, JSON.stringify(settled.json));

    const attempts = await signedAttempts(facilitator.pool, key);
    const mined = attempts.find((a) => a.txHash === settled.json.transaction);
    assert.ok(mined, 'the answer is one of the stored attempts');
    assert.equal(isCancelRaw(mined.rawTx), false, 'a transfer, not the cancel');
    assert.equal(Transaction.from(mined.rawTx).nonce, nonceBefore + 1, 'submitted again at the next gas nonce');
    assert.equal(Transaction.from(mined.rawTx).data, Transaction.from(attempts[0].rawTx).data, 'the same transfer');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: mined.txHash, value: 55_000n }]);
    assert.equal(await balanceOf(provider, payer.address), payerBefore - 55_000n, 'the payer charged once');
    assert.equal(await gasNonce(), nonceBefore + 2, 'the cancel, then the transfer');
    const record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.status, 'settled');
    assert.equal(record?.txHash, mined.txHash);
    assert.equal(record?.gasNonce, nonceBefore + 1);
  });

  describe('the worker dies between the cancel and its mining', () => {
    const crashing = killableWorker('facilitator-resubmit-crash', 1500);

    it('the restarted worker finds the mined cancel and submits the transfer again, once; the payer charged once', async () => {
      await crashing.up();
      const { payer, payTo, body, key, payerBefore } = await newPayment(75_000n);
      const nonceBefore = await provider.getTransactionCount(crashing.stack.gasWallet, 'latest');

      await provider.send('evm_setAutomine', [false]);
      try {
        const first = await gateway.client.post('/settle', body, crashing.stack.url);
        assert.equal(first.status, 503, 'nothing mined yet');
        await until('the cancel in the pool', async () => {
          const attempts = await signedAttempts(crashing.stack.pool, key);
          const latest = attempts[attempts.length - 1];
          return latest && isCancelRaw(latest.rawTx) && (await provider.getTransaction(latest.txHash)) ? true : null;
        });
        await crashing.down();
        await provider.send('evm_mine', []);
      } finally {
        await provider.send('evm_setAutomine', [true]);
      }

      await crashing.up();
      const settled = await until(
        'the settled answer',
        async () => {
          const res = await gateway.client.post('/settle', body, crashing.stack.url);
          return res.status === 200 ? res : null;
        },
        60_000,
      );
      assert.equal(settled.json.success, true, JSON.stringify(settled.json));
      const attempts = await signedAttempts(crashing.stack.pool, key);
      const transfers = attempts.filter((a) => !isCancelRaw(a.rawTx));
      assert.equal(
        new Set(transfers.map((a) => Transaction.from(a.rawTx).nonce)).size,
        2,
        'the transfer at its first gas nonce, then once again at the next',
      );
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: settled.json.transaction, value: 75_000n }]);
      assert.equal(await balanceOf(provider, payer.address), payerBefore - 75_000n, 'the payer charged once');
      assert.equal(
        await provider.getTransactionCount(crashing.stack.gasWallet, 'latest'),
        nonceBefore + 2,
        'the cancel, then the transfer',
      );
    });
  });

  describe('the payer uses the authorization itself after the facilitator’s transfer reverted', () => {
    // The inclusion timeout is long enough that no cancel is sent while the test holds the transfer in the pool.
    const blind = killableWorker('facilitator-late-use', 3500);

    it('drained before the transfer, topped up and used by the payer after it: settled in bounded time with the payer’s transaction, charged once', async () => {
      await blind.up();
      const { payer, payTo, payment, body, key, payerBefore } = await newPayment(35_000n);
      const token = stack().infra.tokenAddress;
      const signer = payer.connect(provider);
      await provider.send('anvil_setBalance', [payer.address, `0x${parseEther('1').toString(16)}`]);

      // The worker is gone while the chain moves, so the revert is first seen after the payer's
      // later use of the authorization (as by a worker that was down, or retrying an outage).
      await provider.send('evm_setAutomine', [false]);
      let revertBlock;
      try {
        const first = gateway.client.post('/settle', body, blind.stack.url);
        const sent = await until('the facilitator’s broadcast', async () => {
          const record = await findSettlement(blind.stack.pool, key);
          return record?.txHash && (await provider.getTransaction(record.txHash)) ? record : null;
        });
        await blind.down();
        assert.equal((await first).status, 503, 'nothing mined yet');
        const ours = Transaction.from(sent.rawTx!);
        // The payer moves its whole balance away first, in the same block: the transfer reverts.
        await tokenContract(token, signer).transfer(newPayTo(), payerBefore, {
          gasLimit: 100_000n,
          maxPriorityFeePerGas: ours.maxPriorityFeePerGas! * 10n,
          maxFeePerGas: ours.maxFeePerGas! * 10n,
        });
        await provider.send('evm_mine', []);
        const revert = await provider.getTransactionReceipt(sent.txHash!);
        assert.equal(revert?.status, 0, 'the facilitator’s transfer reverted');
        assert.equal(await balanceOf(provider, payer.address), 0n);
        revertBlock = revert!.blockNumber;
      } finally {
        await provider.send('evm_setAutomine', [true]);
      }
      // Blocks later, the payer tops up and submits the same (public) authorization itself.
      await fund(stack().infra.chainRpcUrl, token, payer.address, { usdc: 100_000n });
      const a = payment.payload.authorization;
      const own = await (
        await tokenContract(token, signer)[
          'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)'
        ](a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, payment.payload.signature, {
          gasLimit: 200_000n,
        })
      ).wait();
      assert.equal(own?.status, 1);
      assert.ok(own!.blockNumber > revertBlock, 'used after the revert’s block');

      await blind.up();
      const answer = await until(
        'a final answer',
        async () => {
          const res = await gateway.client.post('/settle', body, blind.stack.url);
          return res.status === 200 ? res : null;
        },
        60_000,
      );
      // What the chain says: this authorization paid payTo once, by the payer's own transaction.
      assert.equal(answer.json.success, true, JSON.stringify(answer.json));
      assert.equal(answer.json.transaction, own!.hash);
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: own!.hash, value: 35_000n }]);
      assert.equal(await balanceOf(provider, payer.address), 100_000n - 35_000n, 'the payer charged once');
      const record = await findSettlement(blind.stack.pool, key);
      assert.equal(record?.status, 'settled');
      assert.equal(record?.txHash, own!.hash);
    });
  });
});
