// A facilitator transfer that reverts while the payer's authorization is still unused (the
// payer's balance was moved away between the facilitator's simulation and the block) is not a
// final failure: the reverted transaction is public, with the signed authorization in its
// calldata, so anyone can submit it again until validBefore once the payer has funds. Told to
// pay again, the payer would sign a second authorization and then be charged by the first one
// too. So, on the real stack through the gateway (anvil with mining paused so the drain lands
// ahead of the transfer in one block):
// - the call is answered `503 payment is still settling` while the chain's clock is before
//   validBefore, and the final `402 settlement_failed` once it is past (the chain's clock moved
//   with evm_increaseTime), nothing collected;
// - a payer who tops up meanwhile gets its call: the watcher submits the transfer again once its
//   simulation succeeds, the same header buys the call once, and the payer is charged once.
// Either way the revert's gas is charged to the account's failed-gas budget once, however many
// times the watcher reads the revert. A pending revert whose watcher was lost is decided once
// validBefore has passed: the sweeper starts its watcher again.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Transaction, parseEther, type JsonRpcProvider, type TransactionReceipt } from 'ethers';
import { stack } from '../support/stack.ts';
import { pastValidBefore, until, type FacilitatorStack } from '../support/facilitator.ts';
import { withOwnFacilitator } from '../support/settling.ts';
import {
  balanceOf,
  encodePayment,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { call, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { fund, tokenContract } from '../../scripts/dev/chain.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { signedAttempts } from '../../facilitator/store/gas.ts';
import { isCancelRaw } from '../../facilitator/settlement/signed.ts';

const STILL_SETTLING = 'payment is still settling; retry with the same payment header';

describe('a facilitator transfer that reverts with the authorization unused', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let gateway: TestAccount;
  let facilitator: FacilitatorStack;
  let upstream: TestUpstream;
  let token: string;
  withOwnFacilitator(
    'revert-pending',
    {
      FACILITATOR_SETTLE_DEADLINE_MS: '15000',
      // Long enough that no cancel is sent while the test holds the transfer in the pool.
      FACILITATOR_INCLUSION_TIMEOUT_MS: '5000',
      FACILITATOR_FEE_BUMP_AFTER_MS: '0',
      // The sweeper restarts the watcher of a settlement pending this long past validBefore,
      // looking every 200 ms (not every 2 s) so the test does not wait out its interval.
      FACILITATOR_SWEEP_AFTER_MS: '1000',
      FACILITATOR_SWEEP_EVERY_MS: '200',
    },
    (own) => ({ provider, gateway, facilitator } = own),
  );
  before(async () => {
    upstream = await startUpstream();
    token = await settlingTenant(`tenant-revert-pending-${randomUUID()}`, gateway, facilitator.url);
  });
  after(() => upstream.close());

  const failedGasToday = async () => {
    const { rows } = await facilitator.pool.query<{ wei: string }>(
      'select coalesce(sum(failed_gas_wei), 0)::text as wei from daily_usage where account_id = $1',
      [gateway.account.id],
    );
    return BigInt(rows[0].wei);
  };

  /** A priced agent, a payer holding `balance` and its signed payment, valid for `validInS` seconds. */
  async function pricedCall(value: bigint, validInS: number) {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('priced-revert'),
        upstream_url: upstream.url,
        pricing: { amount: value.toString(), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    const payer = (await newPayer(1_000_000n)).connect(provider);
    await provider.send('anvil_setBalance', [payer.address, `0x${parseEther('1').toString(16)}`]);
    const validBefore = Math.floor(Date.now() / 1000) + validInS;
    const payment = await signPayment(payer, { payTo, value, validBefore });
    const marker = `revert-pending ${randomUUID()}`;
    const send = () =>
      call('POST', `/v1/proxy/${created.json.id}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
      });
    return {
      agentId: created.json.id as string,
      payer,
      payTo,
      validBefore,
      key: settlementKey(8453, stack().infra.tokenAddress, payer.address, payment.payload.authorization.nonce),
      send,
      served: () => upstream.received.filter((r) => r.body.toString().includes(marker)).length,
    };
  }

  /**
   * The paid call with mining paused; once the facilitator's transfer is in the pool, the payer
   * moves its whole balance away with a higher tip, and one block mines both: the transfer
   * reverts for want of balance, its authorization unused.
   */
  async function drainedCall(
    c: Awaited<ReturnType<typeof pricedCall>>,
  ): Promise<{ answer: Reply; revert: TransactionReceipt }> {
    await provider.send('evm_setAutomine', [false]);
    try {
      const inFlight = c.send();
      const sent = await until('the facilitator’s broadcast', async () => {
        const record = await findSettlement(facilitator.pool, c.key);
        return record?.txHash && (await provider.getTransaction(record.txHash)) ? record : null;
      });
      const ours = Transaction.from(sent.rawTx!);
      await tokenContract(stack().infra.tokenAddress, c.payer).transfer(newPayTo(), 1_000_000n, {
        gasLimit: 100_000n,
        maxPriorityFeePerGas: ours.maxPriorityFeePerGas! * 10n,
        maxFeePerGas: ours.maxFeePerGas! * 10n,
      });
      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      const revert = await provider.getTransactionReceipt(sent.txHash!);
      assert.equal(revert?.status, 0, 'the facilitator’s transfer reverted');
      assert.equal(await balanceOf(provider, c.payer.address), 0n, 'drained');
      return { answer: await inFlight, revert: revert! };
    } finally {
      await provider.send('evm_setAutomine', [true]);
    }
  }

  function assertStillSettling(answer: Reply) {
    assert.equal(answer.status, 503, answer.text);
    assert.equal(answer.json.error, STILL_SETTLING);
    assert.ok(Number(answer.headers['retry-after']) > 0, 'Retry-After');
  }

  it('drained: 503 while the chain is before validBefore, then the final 402 once it is past; nothing collected, the revert’s gas charged once', async () => {
    // Short-lived, so the chain's clock is moved past validBefore by only a few seconds.
    const c = await pricedCall(20_000n, 30);
    const gasBefore = await failedGasToday();

    const { answer, revert } = await drainedCall(c);
    assertStillSettling(answer);
    const pending = await findSettlement(facilitator.pool, c.key);
    assert.equal(pending?.status, 'pending');
    assert.equal(pending?.failureCause, 'reverted');
    // The same header again: still not final (anyone may still submit the authorization).
    assertStillSettling(await c.send());

    // The chain's clock reaches validBefore: the authorization can no longer be used.
    const final = await pastValidBefore(provider, c.validBefore, () =>
      until('the final answer', async () => {
        const res = await c.send();
        return res.status === 503 ? null : res;
      }),
    );
    assert.equal(final.status, 402, final.text);
    assert.equal(final.json.error, 'settlement_failed');
    assert.equal(final.headers['x-payment-response'], undefined);
    const record = await findSettlement(facilitator.pool, c.key);
    assert.equal(record?.status, 'failed');
    assert.equal(record?.failureCause, 'reverted');
    assert.equal(record?.txHash, revert.hash);
    assert.deepEqual(await transfersTo(provider, c.payTo), [], 'nothing collected');
    assert.equal(c.served(), 0, 'never forwarded');
    assert.equal(
      (await failedGasToday()) - gasBefore,
      revert.gasUsed * revert.gasPrice,
      'the revert’s gas charged once, however often the watcher read it',
    );
  });

  it('drained, then topped up: the transfer is submitted again and settles; the same header buys the call once, charged once', async () => {
    const c = await pricedCall(25_000n, 300);
    const gasBefore = await failedGasToday();

    const { answer, revert } = await drainedCall(c);
    assertStillSettling(answer);
    assert.equal((await findSettlement(facilitator.pool, c.key))?.status, 'pending');

    await fund(stack().infra.chainRpcUrl, stack().infra.tokenAddress, c.payer.address, { usdc: 100_000n });
    const paid = await until('the paid call', async () => {
      const res = await c.send();
      if (res.status === 503) {
        assert.equal(res.json.error, STILL_SETTLING);
        return null;
      }
      return res;
    });
    assert.equal(paid.status, 202, paid.text);
    const receipt = JSON.parse(Buffer.from(String(paid.headers['x-payment-response']), 'base64').toString());
    assert.equal(receipt.success, true);
    const done = await waitForInvocation(token, c.agentId, paid.json.invocation_id);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.payment_transaction, receipt.transaction);
    assert.equal(c.served(), 1, 'served once');

    // The facilitator's own transfer, submitted again at a new gas nonce after the revert.
    const attempts = await signedAttempts(facilitator.pool, c.key);
    const mined = attempts.find((a) => a.txHash === receipt.transaction);
    assert.ok(mined, 'the answer is one of the facilitator’s stored attempts');
    assert.equal(isCancelRaw(mined.rawTx), false);
    assert.equal(Transaction.from(mined.rawTx).data, Transaction.from(attempts[0].rawTx).data, 'the same transfer');
    assert.notEqual(Transaction.from(mined.rawTx).nonce, Transaction.from(attempts[0].rawTx).nonce);
    assert.deepEqual(await transfersTo(provider, c.payTo), [{ hash: receipt.transaction, value: 25_000n }]);
    assert.equal(await balanceOf(provider, c.payer.address), 100_000n - 25_000n, 'the payer charged once');
    const record = await findSettlement(facilitator.pool, c.key);
    assert.equal(record?.status, 'settled');
    assert.equal(
      (await failedGasToday()) - gasBefore,
      revert.gasUsed * revert.gasPrice,
      'the revert’s gas charged once',
    );
    // The header has bought its call.
    const again = await c.send();
    assert.equal(again.status, 402, again.text);
    assert.equal(again.json.error, 'payment already used');
  });

  it('the watcher of a pending revert is lost: the failure is still made final once validBefore has passed', async () => {
    const c = await pricedCall(15_000n, 15);
    const { answer, revert } = await drainedCall(c);
    assertStillSettling(answer);
    // An operator terminates the watcher (the record stays pending: nothing decides it).
    const watcher = stack().temporal.workflow.getHandle(`watch:${c.key}`);
    await until('the watcher', async () => (await watcher.describe().catch(() => null))?.status.name === 'RUNNING');
    await watcher.terminate('test: a lost watcher');

    const record = await pastValidBefore(provider, c.validBefore, () =>
      until(
        'the final record',
        async () => {
          const found = await findSettlement(facilitator.pool, c.key);
          return found?.status === 'pending' ? null : found;
        },
        60_000,
      ),
    );
    assert.equal(record?.status, 'failed');
    assert.equal(record?.failureCause, 'reverted');
    assert.equal(record?.txHash, revert.hash);
    // Decided by the new watcher the sweeper started, or by the settlement's own retry when it
    // came first: either way the lost watcher left nothing pending (a watcher the sweeper
    // started meanwhile reads the final record and ends).
    await until('no watcher left waiting', async () => (await watcher.describe()).status.name !== 'RUNNING');
    assert.deepEqual(await transfersTo(provider, c.payTo), [], 'nothing collected');
    assert.equal(c.served(), 0, 'never forwarded');
  });
});
