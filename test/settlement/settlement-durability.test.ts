// Settlement durability on the real stack: a second facilitator (its own task queue) whose
// worker runs in a child process the test can SIGKILL. Mining is switched off so a
// transaction can be caught between broadcast and inclusion.
// - no worker: the settle waits up to the request deadline, then 503 with Retry-After;
// - worker killed mid-broadcast (bytes stored and sent, not yet mined, then dropped from the
//   node's pool): after a restart exactly one transaction lands, with the stored hash;
// - inclusion timeout: the transfer is replaced by a cancel at its gas nonce; 503 while neither
//   is mined, then (the cancel mined, the authorization too close to its validBefore to submit
//   the transfer again) a final success false and no transfer;
// - a transfer the node mined just before the cancel (a lagging RPC relay hides its receipt
//   until the cancel is sent): success with the transfer's hash, one transaction.
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import {
  startFacilitatorStack,
  spawnFacilitatorWorker,
  pastValidBefore,
  until,
  type FacilitatorStack,
  type SpawnedWorker,
} from '../support/facilitator.ts';
import {
  balanceOf,
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { Transaction, Wallet } from 'ethers';
import { DEV_ACCOUNTS, tokenContract } from '../../scripts/dev/chain.ts';
import { signedAttempts } from '../../facilitator/store/gas.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { isCancelRaw } from '../../facilitator/settlement/signed.ts';
import { startLaggingRpc, type LaggingRpc } from '../support/lagging-rpc.ts';

describe('settlement durability', function () {
  this.timeout(180_000);
  let provider: ReturnType<typeof chainProvider>;
  let gateway: TestAccount;

  before(async () => {
    provider = chainProvider();
    gateway = await newAccount('durability-gateway');
  });
  after(async () => {
    await provider.send('evm_setAutomine', [true]).catch(() => undefined);
    await gateway.client.close();
    provider.destroy();
  });

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  /** The next nonce of a facilitator's gas wallet (each facilitator below has its own queue, so its own wallet). */
  const gasNonce = (wallet: string) => provider.getTransactionCount(wallet, 'latest');

  describe('worker in a child process', () => {
    let facilitator: FacilitatorStack;
    let worker: SpawnedWorker | undefined;

    before(async () => {
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        inProcessWorker: false,
        overrides: {
          FACILITATOR_TASK_QUEUE: 'facilitator-durability',
          FACILITATOR_SETTLE_DEADLINE_MS: '4000',
          FACILITATOR_INCLUSION_TIMEOUT_MS: '3000',
        },
      });
    });
    after(async () => {
      worker?.child.kill('SIGKILL');
      await worker?.exited;
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await facilitator.close();
    });

    it('answers 503 with Retry-After while the settlement is in flight past the deadline, then settles once a worker runs', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const signed = await signPayment(payer, { payTo, value: 10_000n });
      const body = settleBody(signed, requirements(payTo, 10_000n));
      let answered = false;
      const answer = gateway.client.post('/settle', body, facilitator.url).finally(() => (answered = true));
      // The settlement is handed over (its request stored for the workflow) while the caller
      // still waits: it is answered at the deadline, not as soon as it is in flight.
      const key = keyOf(payer.address, signed.payload.authorization.nonce);
      await until(
        'the settlement to be handed over',
        async () =>
          (await facilitator.pool.query('select 1 from settle_requests where settlement_key = $1', [key])).rowCount,
      );
      assert.equal(answered, false, 'the caller still waits while its settlement is in flight');
      const first = await answer;
      assert.equal(first.status, 503);
      assert.ok(Number(first.headers['retry-after']) > 0);
      assert.equal(first.json.error, 'settlement in progress');

      worker = spawnFacilitatorWorker(facilitator.env);
      await worker.ready;
      const second = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(second.status, 200, JSON.stringify(second.json));
      assert.equal(second.json.success, true);
      assert.equal(await balanceOf(provider, payTo), 10_000n);
    });

    it('kills the worker mid-broadcast: after a restart exactly one transaction, with the stored hash', async () => {
      assert.ok(worker, 'the previous test started a worker');
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const payment = await signPayment(payer, {
        payTo,
        value: 20_000n,
        validBefore: Math.floor(Date.now() / 1000) + 300,
      });
      const body = settleBody(payment, requirements(payTo, 20_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);
      const nonceBefore = await gasNonce(facilitator.gasWallet);

      await provider.send('evm_setAutomine', [false]);
      const inFlight = gateway.client.post('/settle', body, facilitator.url);
      // Broadcast: the signed bytes are stored and were handed to the node, not yet mined.
      const sent = await until('the broadcast', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'broadcast' ? record : null;
      });
      assert.ok(sent.txHash && sent.rawTx);
      // The send is counted alongside it (facilitator/settlement/broadcast.ts), so the record may
      // say broadcast a moment before the node has the bytes.
      await until('the node to hold the transaction', async () => provider.getTransaction(sent.txHash!));

      worker!.child.kill('SIGKILL');
      await worker!.exited;
      // Make the crash as bad as it gets: the node forgets the transaction, so only a re-send
      // of the stored bytes can land it.
      await provider.send('anvil_dropTransaction', [sent.txHash]);
      assert.equal(await provider.getTransaction(sent.txHash), null);
      await provider.send('evm_setAutomine', [true]);
      const early = await inFlight;
      assert.equal(early.status, 503, 'the caller was told to retry, not that the payment failed');

      worker = spawnFacilitatorWorker(facilitator.env);
      await worker.ready;
      // The same payment again (as the gateway's retry would send it) gets the settled answer.
      const done = await until(
        'the settled answer',
        async () => {
          const res = await gateway.client.post('/settle', body, facilitator.url);
          return res.status === 200 ? res : null;
        },
        60_000,
      );
      assert.equal(done.json.success, true, JSON.stringify(done.json));
      assert.equal(done.json.transaction, sent.txHash, 'the stored transaction, not a new one');

      assert.equal(
        await gasNonce(facilitator.gasWallet),
        nonceBefore + 1,
        'exactly one transaction from the gas wallet',
      );
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: sent.txHash, value: 20_000n }]);
      assert.equal(await balanceOf(provider, payTo), 20_000n);
      const record = await findSettlement(facilitator.pool, key);
      assert.equal(record?.status, 'settled');
      assert.ok(record!.attempts >= 2, `re-sent after the restart (attempts ${record?.attempts})`);
      assert.equal(record?.gasNonce, sent.gasNonce);
    });
  });

  describe('inclusion timeout', () => {
    let facilitator: FacilitatorStack;
    before(async () => {
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        overrides: {
          FACILITATOR_TASK_QUEUE: 'facilitator-inclusion',
          FACILITATOR_SETTLE_DEADLINE_MS: '8000',
          FACILITATOR_INCLUSION_TIMEOUT_MS: '1500',
          // The payment is accepted (validBefore 35 s away), but once its cancel is mined (8 s
          // later) less than the margin plus an inclusion timeout is left: the transfer is not
          // submitted again.
          FACILITATOR_VALIDITY_MARGIN_S: '30',
        },
      });
    });
    after(async () => {
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await facilitator.close();
    });

    it('replaces an unmined transfer by a cancel at the inclusion timeout: 503 while neither is mined, then a final success false and no transfer', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const validBefore = Math.floor(Date.now() / 1000) + 35;
      const payment = await signPayment(payer, { payTo, value: 30_000n, validBefore });
      const body = settleBody(payment, requirements(payTo, 30_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);
      const nonceBefore = await gasNonce(facilitator.gasWallet);
      const balanceBefore = await balanceOf(provider, payer.address);

      await provider.send('evm_setAutomine', [false]);
      const res = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(res.status, 503, 'not mined yet is not a collection outcome');
      assert.ok(Number(res.headers['retry-after']) > 0);
      // The answer comes at the deadline; the record says `pending` once the cancel wait ends.
      const pending = await until('the record pending', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'pending' ? record : null;
      });
      assert.equal(pending.failureCause, 'inclusion_timeout');
      const attempts = await signedAttempts(facilitator.pool, key);
      assert.ok(attempts.length >= 2, 'the transfer and its cancel');
      assert.equal(isCancelRaw(attempts[0].rawTx), false);
      assert.equal(isCancelRaw(attempts[attempts.length - 1].rawTx), true, 'the latest attempt is the cancel');
      assert.equal(
        new Set(attempts.map((a) => Transaction.from(a.rawTx).nonce)).size,
        1,
        'every attempt at the one gas nonce',
      );

      // A retry meanwhile: still 503, no second transaction.
      const retry = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(retry.status, 503);

      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      // The cancel is mined, but the payer's authorization could still be submitted by anyone
      // until validBefore: still not an outcome.
      await until('the cancel mined', async () =>
        (await transfersTo(provider, payTo)).length === 0 && (await gasNonce(facilitator.gasWallet)) > nonceBefore
          ? true
          : null,
      );
      assert.equal(
        (await gateway.client.post('/settle', body, facilitator.url)).status,
        503,
        'still 503 before validBefore',
      );
      // The chain's clock moved past validBefore (no block can include the transfer any more):
      // the watcher makes the failure final.
      const failed = await pastValidBefore(provider, validBefore, () =>
        until('the watcher', async () => {
          const record = await findSettlement(facilitator.pool, key);
          return record?.status === 'failed' ? record : null;
        }),
      );
      assert.equal(failed.failureCause, 'inclusion_timeout');
      const after = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(after.status, 200);
      assert.equal(after.json.success, false);
      assert.equal(after.json.errorReason, 'settlement_failed');
      assert.equal(after.json.transaction, undefined, "the cancel is not the payer's transaction");
      assert.deepEqual(await transfersTo(provider, payTo), []);
      assert.equal(await balanceOf(provider, payer.address), balanceBefore, 'the payer was not charged');
      assert.equal(
        await gasNonce(facilitator.gasWallet),
        nonceBefore + 1,
        'one transaction at the gas nonce: the cancel',
      );

      // The settlement's workflow ends failed, or pending with its watcher ending failed
      // (whichever run was delivering when the block came recorded it).
      const run = await stack().temporal.workflow.getHandle(key).result();
      const final = run.status === 'pending' ? await stack().temporal.workflow.getHandle(`watch:${key}`).result() : run;
      assert.equal(final.status, 'failed');
    });
  });

  describe('an authorization submitted by someone else after its transfer was cancelled', () => {
    let facilitator: FacilitatorStack;
    before(async () => {
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        overrides: {
          FACILITATOR_TASK_QUEUE: 'facilitator-cancel-then-used',
          FACILITATOR_SETTLE_DEADLINE_MS: '6000',
          FACILITATOR_INCLUSION_TIMEOUT_MS: '1500',
          // Too close to validBefore once the cancel is mined for the facilitator to submit the
          // transfer again (settlement-front-run.test.ts has that case): the third party does.
          FACILITATOR_VALIDITY_MARGIN_S: '30',
        },
      });
    });
    after(async () => {
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await facilitator.close();
    });

    it('is the settlement: the record says settled with that transaction, never failed', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const validBefore = Math.floor(Date.now() / 1000) + 35;
      const payment = await signPayment(payer, { payTo, value: 35_000n, validBefore });
      const body = settleBody(payment, requirements(payTo, 35_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);

      await provider.send('evm_setAutomine', [false]);
      assert.equal((await gateway.client.post('/settle', body, facilitator.url)).status, 503);
      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      // The signature was public in the pool: a third party submits the authorization itself.
      const submitter = new Wallet(DEV_ACCOUNTS[3].privateKey, provider);
      const a = payment.payload.authorization;
      const tx = await tokenContract(stack().infra.tokenAddress, submitter)[
        'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)'
      ](a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, payment.payload.signature);
      await tx.wait();
      // Used is final: the token decides at once, without waiting for validBefore.
      const settled = await until('the watcher', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'settled' ? record : null;
      });
      assert.equal(settled.txHash, tx.hash);
      const after = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(after.json.success, true);
      assert.equal(after.json.transaction, tx.hash, 'the payer learns where its money went');
    });
  });

  describe('transfer mined as it is cancelled', () => {
    let facilitator: FacilitatorStack;
    let rpc: LaggingRpc;
    before(async () => {
      rpc = await startLaggingRpc(stack().infra.chainRpcUrl);
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        overrides: {
          FACILITATOR_TASK_QUEUE: 'facilitator-lagging-rpc',
          CHAIN_RPC_URL: rpc.url,
          FACILITATOR_SETTLE_DEADLINE_MS: '8000',
          FACILITATOR_INCLUSION_TIMEOUT_MS: '1500',
        },
      });
    });
    after(async () => {
      await facilitator.close();
      await rpc.close();
    });

    it('answers success with the transfer when the node had mined it before the cancel', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const payment = await signPayment(payer, {
        payTo,
        value: 40_000n,
        validBefore: Math.floor(Date.now() / 1000) + 300,
      });
      const body = settleBody(payment, requirements(payTo, 40_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);
      const nonceBefore = await gasNonce(facilitator.gasWallet);

      // anvil mines the transfer at once; the relay hides its receipt until the cancel is sent.
      rpc.lagUntilCancel();
      const res = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(res.status, 200, JSON.stringify(res.json));
      assert.equal(res.json.success, true);
      const attempts = await signedAttempts(facilitator.pool, key);
      assert.equal(rpc.cancelsSeen.length, 1, 'the cancel was sent');
      assert.equal(res.json.transaction, attempts[0].txHash, 'the original transfer won');
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: attempts[0].txHash, value: 40_000n }]);
      assert.equal(await gasNonce(facilitator.gasWallet), nonceBefore + 1);
      // The record's final write follows the answer (docs/SETTLEMENT.md): waited for, not raced.
      const record = await waitFor(
        async () => {
          const found = await findSettlement(facilitator.pool, key);
          return found?.status === 'settled' ? found : undefined;
        },
        { what: 'the settlement record to say settled' },
      );
      assert.equal(record.txHash, attempts[0].txHash);
    });
  });
});
