// The settlement outbox (docs/SETTLEMENT.md, "The outbox"): /settle claims and sends on the
// strength of its PostgreSQL records, with its workflow start issued alongside and not waited
// for; the sweeper starts the workflow of every claimed settlement whose start was never
// acknowledged.
// - Temporal unreachable: /settle still settles (one transaction), a duplicate gets the same
//   hash from the record, and once Temporal is back the sweeper creates the workflow, which
//   completes with that same transaction and nothing more on chain;
// - a process that died after claiming and signing, before its start and its broadcast: the
//   sweeper starts the workflow, whose activity sends the stored bytes, exactly once;
// - the facilitator process (HTTPS and embedded worker, as npm start runs it) SIGKILLed
//   mid-broadcast, before any workflow exists, the node then losing the transaction: after a
//   restart the sweeper's workflow re-sends the stored bytes, exactly one transaction.
// Real parts: the shared dev server behind a TCP relay (Temporal "down": every connection
// refused and cut), the stack's PostgreSQL and anvil, a facilitator on its own
// task queue with a fast sweeper. The dead process's state is made with the facilitator's own
// statements (claim check, re-verification, presigning, the claim), as its handler runs them.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Transaction } from 'ethers';
import { stack } from '../support/stack.ts';
import {
  facilitatorEnv,
  gasWalletEnv,
  ownGasWallet,
  finalRecord,
  startFacilitatorStack,
  until,
  type FacilitatorStack,
} from '../support/facilitator.ts';
import { startTcpRelay, type TcpRelay } from '../support/tcp-relay.ts';
import { claimAsDeadHandler as claimDead, settlementWorkflowResult } from '../support/settling.ts';
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
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { markRefused, markWorkflowStarted } from '../../facilitator/store/requests.ts';
import { loadFacilitatorConfig } from '../../facilitator/config.ts';
import type { ExactSettleRequest } from '../../x402/schemes/exact/schemas.ts';

describe('settlement outbox', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let gateway: TestAccount;
  let relay: TcpRelay;
  let facilitator: FacilitatorStack;

  before(async () => {
    provider = chainProvider();
    gateway = await newAccount('outbox-gateway');
    relay = await startTcpRelay(stack().infra.temporalAddress);
    facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: {
        TEMPORAL_ADDRESS: relay.address,
        FACILITATOR_TASK_QUEUE: 'facilitator-outbox',
        FACILITATOR_SWEEP_EVERY_MS: '200',
        FACILITATOR_SWEEP_AFTER_MS: '500',
      },
    });
  });
  after(async () => {
    relay.down = false;
    await facilitator.close();
    await relay.close();
    await gateway.client.close();
    provider.destroy();
  });

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  const gasNonce = (wallet = facilitator.gasWallet) => provider.getTransactionCount(wallet, 'latest');
  const startedAt = async (key: string) =>
    (
      await facilitator.pool.query<{ workflow_started_at: Date | null }>(
        'select workflow_started_at from settle_requests where settlement_key = $1',
        [key],
      )
    ).rows[0]?.workflow_started_at ?? null;
  const workflowResult = settlementWorkflowResult;

  const claimAsDeadHandler = (key: string, request: ExactSettleRequest, config = facilitator.config) =>
    claimDead(facilitator, gateway.account, key, request, config);

  it('Temporal unreachable: /settle settles once from the outbox, and the sweeper creates its workflow once Temporal is back', async () => {
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 40_000n });
    const body = settleBody(payment, requirements(payTo, 40_000n));
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const nonceBefore = await gasNonce();

    relay.down = true;
    relay.cut();
    const res = await gateway.client.post('/settle', body, facilitator.url);
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true);
    assert.match(res.json.transaction, /^0x[0-9a-f]{64}$/);
    // A duplicate while Temporal is still down: the record answers, same hash, nothing sent.
    const again = await gateway.client.post('/settle', body, facilitator.url);
    assert.equal(again.status, 200, JSON.stringify(again.json));
    assert.equal(again.json.transaction, res.json.transaction);
    assert.equal((await finalRecord(facilitator.pool, key)).status, 'settled');
    assert.equal(await startedAt(key), null, 'no workflow yet');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: res.json.transaction, value: 40_000n }]);

    relay.down = false;
    const outcome = await workflowResult(key);
    assert.equal(outcome.status, 'settled');
    assert.equal(outcome.transaction, res.json.transaction, 'the workflow completes with the outbox transaction');
    assert.ok(await startedAt(key), 'the sweeper marked the request');
    const attributes = (await stack().temporal.workflow.getHandle(key).describe()).searchAttributes;
    assert.deepEqual(attributes.SettlementStatus, ['settled']);
    assert.deepEqual(attributes.TxHash, [res.json.transaction]);
    assert.equal(await gasNonce(), nonceBefore + 1, 'exactly one transaction from the gas wallet');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: res.json.transaction, value: 40_000n }]);
    assert.equal(await balanceOf(provider, payTo), 40_000n);
  });

  it('a settlement claimed and signed by a process that died before its workflow start: the sweeper starts it, and the stored bytes are sent exactly once', async () => {
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 50_000n });
    const request = settleBody(payment, requirements(payTo, 50_000n));
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const nonceBefore = await gasNonce();

    await claimAsDeadHandler(key, request);
    const stored = (await findSettlement(facilitator.pool, key))!;
    assert.equal(await provider.getTransaction(stored.txHash!), null, 'nothing sent yet');

    const outcome = await workflowResult(key);
    assert.equal(outcome.status, 'settled');
    assert.equal(outcome.transaction, stored.txHash, 'the stored transaction, not a new one');
    const record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.status, 'settled');
    assert.equal(record?.attempts, 1, 'sent once');
    assert.equal(await gasNonce(), nonceBefore + 1, 'exactly one transaction from the gas wallet');
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: stored.txHash, value: 50_000n }]);
    // A /settle of the same authorization now answers from the record.
    const res = await gateway.client.post('/settle', request, facilitator.url);
    assert.equal(res.json.transaction, stored.txHash);
  });

  it("a signed settlement whose run is gone holds the gas wallet's nonce: the sweeper starts its watcher, which sends the stored bytes, and the settlement queued behind them goes through", async () => {
    const nonceBefore = await gasNonce();
    const lostPayer = await newPayer(1_000_000n);
    const lostPayTo = newPayTo();
    const lost = await signPayment(lostPayer, { payTo: lostPayTo, value: 30_000n });
    const lostKey = keyOf(lostPayer.address, lost.payload.authorization.nonce);
    await claimAsDeadHandler(lostKey, settleBody(lost, requirements(lostPayTo, 30_000n)));
    // Its workflow was started, then terminated by an operator before anything was sent: the
    // request is marked, so the outbox sweeper does not start it again.
    await markWorkflowStarted(facilitator.pool, lostKey);
    const held = (await findSettlement(facilitator.pool, lostKey))!;
    // Another, whose run gave up before signing and told its caller it failed, though bytes were
    // signed after all (a late attempt): sending them would charge the payer for nothing. Signed
    // with a wallet nothing else uses, so the nonce it holds delays no one.
    const refusedPayer = await newPayer(1_000_000n);
    const refusedPayTo = newPayTo();
    const refused = await signPayment(refusedPayer, { payTo: refusedPayTo, value: 10_000n });
    const refusedKey = keyOf(refusedPayer.address, refused.payload.authorization.nonce);
    const refusedWallet = await ownGasWallet(stack().infra, 'facilitator-outbox-refused');
    await claimAsDeadHandler(
      refusedKey,
      settleBody(refused, requirements(refusedPayTo, 10_000n)),
      loadFacilitatorConfig(facilitatorEnv(stack().infra, gasWalletEnv(refusedWallet))),
    );
    await markRefused(facilitator.pool, refusedKey, 'unavailable');
    await markWorkflowStarted(facilitator.pool, refusedKey);

    // The next settlement takes the next gas nonce: the node holds it behind the unsent one.
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 20_000n });
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const answer = gateway.client.post('/settle', settleBody(payment, requirements(payTo, 20_000n)), facilitator.url);
    const behind = await until('the next settlement sent', async () => {
      const record = await findSettlement(facilitator.pool, key);
      return record?.status === 'broadcast' ? record : null;
    });
    assert.equal(Transaction.from(behind.rawTx!).nonce, Transaction.from(held.rawTx!).nonce + 1);
    assert.equal(await provider.getTransactionReceipt(behind.txHash!), null, 'not mined: its gas nonce waits');

    // Idle past what a live run allows (the confirm step's bound and the sweep delay): its run is gone.
    await facilitator.pool.query(
      "update settlements set updated_at = now() - interval '1 hour' where settlement_key = any($1)",
      [[lostKey, refusedKey]],
    );
    const res = await answer;
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    assert.equal(res.json.transaction, behind.txHash);

    const recovered = await finalRecord(facilitator.pool, lostKey);
    assert.equal(recovered.status, 'settled');
    assert.equal(recovered.txHash, held.txHash, 'the stored transaction, not a new one');
    const watcher = await stack().temporal.workflow.getHandle(`watch:${lostKey}`).describe();
    assert.equal(watcher.type, 'SettlementWatchWorkflow');
    assert.deepEqual(await transfersTo(provider, lostPayTo), [{ hash: held.txHash, value: 30_000n }]);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: behind.txHash, value: 20_000n }]);
    assert.equal(await gasNonce(), nonceBefore + 2, 'two transactions from the gas wallet, one each');
    // The sweep that found the lost settlement found the refused one idle as long: left alone.
    await assert.rejects(stack().temporal.workflow.getHandle(`watch:${refusedKey}`).describe(), {
      name: 'WorkflowNotFoundError',
    });
    const untouched = await findSettlement(facilitator.pool, refusedKey);
    assert.equal(untouched?.status, 'signed');
    assert.equal(await provider.getTransaction(untouched.txHash!), null, 'its bytes never sent');
  });

  it('the facilitator process SIGKILLed mid-broadcast before its workflow exists: after a restart, exactly one transaction, with the stored hash', async () => {
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, {
      payTo,
      value: 60_000n,
      validBefore: Math.floor(Date.now() / 1000) + 300,
    });
    const body = settleBody(payment, requirements(payTo, 60_000n));
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    // The spawned facilitator and its restart share the wallet of their queue.
    const wallet = await ownGasWallet(stack().infra, 'facilitator-outbox-kill');
    const nonceBefore = await gasNonce(wallet.address);
    const overrides = {
      FACILITATOR_TASK_QUEUE: 'facilitator-outbox-kill',
      FACILITATOR_SWEEP_EVERY_MS: '200',
      FACILITATOR_SWEEP_AFTER_MS: '500',
      ...gasWalletEnv(wallet),
    };

    // As npm start runs it: one process, HTTPS and the embedded worker.
    const child = spawn(process.execPath, ['facilitator-service/main.ts'], {
      env: {
        ...process.env,
        ...facilitatorEnv(stack().infra, overrides),
        FACILITATOR_METRICS_PORT: '0',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let restarted: FacilitatorStack | undefined;
    try {
      const url = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on('line', (line) => {
          const found = /"url":"(https:[^"]+)"/.exec(line);
          if (found) resolve(found[1]);
        });
        child.once('exit', (code) => reject(new Error(`facilitator exited early (${code})`)));
      });
      await provider.send('evm_setAutomine', [false]);
      const inFlight = gateway.client.post('/settle', body, url).catch(() => null);
      const sent = await until('the broadcast', async () => {
        const record = await findSettlement(facilitator.pool, key);
        return record?.status === 'broadcast' ? record : null;
      });
      child.kill('SIGKILL');
      await exited;
      assert.equal(await inFlight, null, 'the caller lost its connection, no answer');
      assert.equal(await startedAt(key), null, 'no workflow was acknowledged before the kill');
      await provider.send('anvil_dropTransaction', [sent.txHash]);
      await provider.send('evm_setAutomine', [true]);

      restarted = await startFacilitatorStack(stack().infra, stack().temporal, { overrides });
      const outcome = await workflowResult(key);
      assert.equal(outcome.status, 'settled');
      assert.equal(outcome.transaction, sent.txHash, 'the stored transaction, not a new one');
      const res = await gateway.client.post('/settle', body, restarted.url);
      assert.equal(res.json.transaction, sent.txHash);
      assert.equal(await gasNonce(wallet.address), nonceBefore + 1, 'exactly one transaction from the gas wallet');
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: sent.txHash, value: 60_000n }]);
      const record = await finalRecord(facilitator.pool, key);
      assert.equal(record.gasNonce, sent.gasNonce);
    } finally {
      child.kill('SIGKILL');
      await provider.send('evm_setAutomine', [true]).catch(() => undefined);
      await restarted?.close();
    }
  });
});
