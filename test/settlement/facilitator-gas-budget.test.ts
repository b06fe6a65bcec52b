// Gas griefing is bounded: a settlement that passes simulation and then reverts on chain (the
// payer drains its balance between the facilitator's checks and the block) costs the gas
// wallet its gas. Each settlement in flight holds what it could burn (gas limit × max fee)
// against the account's daily failed-gas budget, and a revert's cost is charged to it. The
// budget here is 1.15 × one settlement's worst case: one fits, a second alongside it does not;
// with a budget equal to what the account burned, nothing fits. Beyond it the account's
// /settle answers 429 before any claim, while other accounts settle as before. The cost is in
// the account's daily record and in the facilitator_failed_gas_wei_total metric, once per
// reverted transaction (the revert keeps its settlement pending until validBefore, and the
// watcher reads it again meanwhile).
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { pastValidBefore, startFacilitatorStack, until, type FacilitatorStack } from '../support/facilitator.ts';
import {
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
  type TestAccount,
} from '../support/x402.ts';
import { usageToday } from '../../facilitator/store/reservations.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { tokenContract } from '../../scripts/dev/chain.ts';
import { EOA_TRANSFER_GAS_LIMIT } from '../../facilitator/chain.ts';
import { registry } from '../../lib/observability/metrics.ts';

describe('facilitator: failed-gas budget per account', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let facilitator: FacilitatorStack;
  let griefer: TestAccount;
  let bystander: TestAccount;

  before(async () => {
    provider = chainProvider();
    // The facilitator signs an EOA's transfer with a 150 000 gas limit at the node's max fee.
    const { maxFeePerGas } = await provider.getFeeData();
    const worstCase = EOA_TRANSFER_GAS_LIMIT * maxFeePerGas!;
    facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: {
        FACILITATOR_TASK_QUEUE: 'facilitator-gas-budget',
        FACILITATOR_FAILED_GAS_DAILY_WEI: String((worstCase * 115n) / 100n),
      },
    });
    griefer = await newAccount('gas-griefer');
    bystander = await newAccount('gas-bystander');
  });
  after(async () => {
    await provider.send('evm_setAutomine', [true]).catch(() => undefined);
    await griefer.client.close();
    await bystander.client.close();
    await facilitator.close();
    provider.destroy();
  });

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  const gasNonce = (wallet: string) => provider.getTransactionCount(wallet, 'latest');

  async function failedGasMetric(accountId: string): Promise<number> {
    const metric = await registry.getSingleMetric('facilitator_failed_gas_wei_total')!.get();
    const series = metric.values.filter((v) => v.labels.account === accountId);
    // An exact transfer is what a payer signs: charged to the account's payers' budget.
    assert.ok(
      series.every((v) => v.labels.budget === 'payers'),
      JSON.stringify(series),
    );
    return series[0]?.value ?? 0;
  }

  it('a settlement that reverts after simulation is charged to the account; over its budget the account gets 429, others do not', async () => {
    const payer = (await newPayer(5_000n)).connect(provider);
    await provider.send('anvil_setBalance', [payer.address, '0xde0b6b3a7640000']);
    const payTo = newPayTo();
    // Short-lived: the revert keeps the settlement pending until the chain passes validBefore.
    const validBefore = Math.floor(Date.now() / 1000) + 30;
    const payment = await signPayment(payer, { payTo, value: 5_000n, validBefore });
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const secondPayer = await newPayer(5_000n); // funded while blocks are still mined

    await provider.send('evm_setAutomine', [false]);
    const answer = griefer.client.post('/settle', settleBody(payment, requirements(payTo, 5_000n)), facilitator.url);
    await until('the broadcast', async () =>
      (await findSettlement(facilitator.pool, key))?.status === 'broadcast' ? true : null,
    );
    // A second settlement of the account while the first could still revert: over the budget.
    const alongside = await griefer.client.post(
      '/settle',
      settleBody(await signPayment(secondPayer, { payTo, value: 5_000n }), requirements(payTo, 5_000n)),
      facilitator.url,
    );
    assert.equal(alongside.status, 429, JSON.stringify(alongside.json));
    // The payer drains its balance in the same block, ahead of the transfer (a higher tip).
    await tokenContract(stack().infra.tokenAddress, payer).transfer(newPayTo(), 5_000n, {
      gasLimit: 100_000n,
      maxPriorityFeePerGas: 50_000_000_000n,
      maxFeePerGas: 100_000_000_000n,
    });
    await provider.send('evm_mine', []);
    await provider.send('evm_setAutomine', [true]);

    // The authorization is still unused and valid: anyone may submit it again, so the answer
    // is not final yet, but the revert's gas is charged already.
    const res = await answer;
    assert.equal(res.status, 503, JSON.stringify(res.json));
    assert.equal((await findSettlement(facilitator.pool, key))?.failureCause, 'reverted');
    const burned = (await usageToday(facilitator.pool)).get(griefer.account.id)?.failedGasWei ?? 0n;
    assert.ok(burned > 0n, "the revert's gas is in the account's daily record");
    assert.equal(await failedGasMetric(griefer.account.id), Number(burned));
    // Once the chain is past validBefore the failure is final, and its gas was charged once.
    const body = settleBody(payment, requirements(payTo, 5_000n));
    const final = await pastValidBefore(provider, validBefore, () =>
      until('the final answer', async () => {
        const retried = await griefer.client.post('/settle', body, facilitator.url);
        return retried.status === 200 ? retried : null;
      }),
    );
    assert.equal(final.json.success, false, JSON.stringify(final.json));
    const record = await findSettlement(facilitator.pool, key);
    assert.equal(record?.status, 'failed');
    assert.equal(record?.failureCause, 'reverted');
    assert.equal((await usageToday(facilitator.pool)).get(griefer.account.id)?.failedGasWei, burned);
    assert.equal(await failedGasMetric(griefer.account.id), Number(burned));

    // A deployment whose budget is what the account already burned today (the same database):
    // no settlement of the account fits any more.
    const spent = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: {
        FACILITATOR_TASK_QUEUE: 'facilitator-gas-budget-spent',
        FACILITATOR_FAILED_GAS_DAILY_WEI: String(burned),
      },
    });
    try {
      const before = await gasNonce(spent.gasWallet);
      const next = await signPayment(await newPayer(5_000n), { payTo, value: 5_000n });
      const refused = await griefer.client.post('/settle', settleBody(next, requirements(payTo, 5_000n)), spent.url);
      assert.equal(refused.status, 429);
      assert.deepEqual(refused.json, { error: 'settlement limit exceeded' });
      assert.equal(
        await findSettlement(
          facilitator.pool,
          keyOf(next.payload.authorization.from, next.payload.authorization.nonce),
        ),
        null,
        'nothing claimed',
      );
      assert.equal(await gasNonce(spent.gasWallet), before, 'no gas spent');
    } finally {
      await spent.close();
    }

    const other = await bystander.client.post(
      '/settle',
      settleBody(await signPayment(await newPayer(5_000n), { payTo, value: 5_000n }), requirements(payTo, 5_000n)),
      facilitator.url,
    );
    assert.equal(other.json.success, true, JSON.stringify(other.json));
  });
});
