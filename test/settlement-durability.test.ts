// Settlement durability on the real stack: a second facilitator (its own task queue) whose
// worker runs in a child process the test can SIGKILL. Mining is switched off so a
// transaction can be caught between broadcast and inclusion.
// - no worker: the settle waits up to the request deadline, then 503 with Retry-After;
// - worker killed mid-broadcast (bytes stored and sent, not yet mined, then dropped from the
//   node's pool): after a restart exactly one transaction lands, with the stored hash;
// - inclusion timeout: success false, the record keeps the hash as pending, and the watcher
//   records the real outcome once the block comes.
import assert from 'node:assert/strict';
import { stack } from './support/stack.ts';
import { startFacilitatorStack, spawnFacilitatorWorker, until, type FacilitatorStack, type SpawnedWorker } from './support/facilitator.ts';
import { balanceOf, chainProvider, newAccount, newPayTo, newPayer, requirements, settleBody, signPayment, transfersTo, type TestAccount } from './support/x402.ts';
import { findSettlement, settlementKey } from '../facilitator/store.ts';

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
  const gasNonce = () => provider.getTransactionCount(stack().facilitator.gasWallet, 'latest');

  describe('worker in a child process', () => {
    let facilitator: FacilitatorStack;
    let worker: SpawnedWorker | undefined;

    before(async () => {
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        inProcessWorker: false,
        overrides: { FACILITATOR_TASK_QUEUE: 'facilitator-durability', FACILITATOR_SETTLE_DEADLINE_MS: '4000', FACILITATOR_INCLUSION_TIMEOUT_MS: '3000' },
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
      const body = settleBody(await signPayment(payer, { payTo, value: 10_000n }), requirements(payTo, 10_000n));
      const started = Date.now();
      const first = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(first.status, 503);
      assert.ok(Number(first.headers['retry-after']) > 0);
      assert.ok(Date.now() - started >= 3_900, 'the caller waited up to the deadline');

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
      const payment = await signPayment(payer, { payTo, value: 20_000n, validBefore: Math.floor(Date.now() / 1000) + 300 });
      const body = settleBody(payment, requirements(payTo, 20_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);
      const nonceBefore = await gasNonce();

      await provider.send('evm_setAutomine', [false]);
      const inFlight = gateway.client.post('/settle', body, facilitator.url);
      // Broadcast: the signed bytes are stored and were handed to the node, not yet mined.
      const sent = await until('the broadcast', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'broadcast' ? record : null;
      });
      assert.ok(sent.txHash && sent.rawTx);
      assert.ok(await provider.getTransaction(sent.txHash), 'the node holds the transaction');

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
      const done = await until('the settled answer', async () => {
        const res = await gateway.client.post('/settle', body, facilitator.url);
        return res.status === 200 ? res : null;
      }, 60_000);
      assert.equal(done.json.success, true, JSON.stringify(done.json));
      assert.equal(done.json.transaction, sent.txHash, 'the stored transaction, not a new one');

      assert.equal(await gasNonce(), nonceBefore + 1, 'exactly one transaction from the gas wallet');
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
        overrides: { FACILITATOR_TASK_QUEUE: 'facilitator-inclusion', FACILITATOR_SETTLE_DEADLINE_MS: '8000', FACILITATOR_INCLUSION_TIMEOUT_MS: '1500' },
      });
    });
    after(async () => {
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await facilitator.close();
    });

    it('answers success false and keeps the hash pending; the watcher records the settlement when the block comes', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const payment = await signPayment(payer, { payTo, value: 30_000n, validBefore: Math.floor(Date.now() / 1000) + 300 });
      const body = settleBody(payment, requirements(payTo, 30_000n));
      const key = keyOf(payer.address, payment.payload.authorization.nonce);

      await provider.send('evm_setAutomine', [false]);
      const res = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(res.status, 200);
      assert.equal(res.json.success, false);
      assert.equal(res.json.errorReason, 'settlement_failed');
      const pending = await findSettlement(facilitator.pool, key);
      assert.equal(pending?.status, 'pending');
      assert.equal(pending?.failureCause, 'inclusion_timeout');
      assert.equal(res.json.transaction, pending?.txHash);

      // A retry meanwhile: the same pending answer, no second transaction.
      const retry = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(retry.json.success, false);
      assert.equal(retry.json.transaction, pending?.txHash);

      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      const settled = await until('the watcher', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'settled' ? record : null;
      });
      assert.equal(settled.txHash, pending?.txHash);
      const after = await gateway.client.post('/settle', body, facilitator.url);
      assert.equal(after.json.success, true);
      assert.equal(after.json.transaction, pending?.txHash);
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: pending!.txHash!, value: 30_000n }]);

      const watchHandle = stack().temporal.workflow.getHandle(`watch:${key}`);
      assert.equal((await watchHandle.result()).status, 'settled');
      const watch = await watchHandle.describe();
      assert.equal(watch.type, 'SettlementWatchWorkflow');
      assert.equal(watch.searchAttributes.SettlementStatus?.[0], 'settled');
    });
  });
});
