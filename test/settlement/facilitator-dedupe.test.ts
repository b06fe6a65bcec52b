// One authorization, one owner: the facilitator answers a duplicate /settle with the stored
// outcome only when it comes from the same account with the same requirements. Another
// account, or other requirements, get the consumed-nonce answer (success false, no
// transaction), never the owner's transaction; and a first submission whose requirements do
// not match the authorization claims nothing, so the rightful submission still settles.
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import {
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
import { startFacilitatorStack, until } from '../support/facilitator.ts';

describe('facilitator: one authorization, one owner', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let owner: TestAccount;
  let other: TestAccount;

  before(async () => {
    provider = chainProvider();
    owner = await newAccount('dedupe-owner');
    other = await newAccount('dedupe-other');
  });
  after(async () => {
    await owner.client.close();
    await other.client.close();
    provider.destroy();
  });

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  const consumed = (json: Record<string, unknown>) => {
    assert.equal(json.success, false, JSON.stringify(json));
    assert.equal(json.errorReason, 'settlement_failed');
    assert.equal(json.transaction, undefined, "never the owner's transaction");
  };

  it('a settled authorization submitted by another account, or with other requirements, is a consumed nonce', async () => {
    const payer = await newPayer(100_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 5_000n });
    const body = settleBody(payment, requirements(payTo, 5_000n));
    const settled = await owner.client.post('/settle', body);
    assert.equal(settled.json.success, true, JSON.stringify(settled.json));

    consumed((await other.client.post('/settle', body)).json);
    // The same account with other (still matching) requirements: a different settlement request.
    consumed((await owner.client.post('/settle', settleBody(payment, requirements(payTo, 9_000n)))).json);
    // The owner's own retry is the settlement's answer.
    const again = await owner.client.post('/settle', body);
    assert.equal(again.json.transaction, settled.json.transaction);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: settled.json.transaction, value: 5_000n }]);
  });

  it('a first submission with wrong requirements does not poison the authorization', async () => {
    const payer = await newPayer(100_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 5_000n });
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    for (const reqs of [
      requirements(newPayTo(), 5_000n),
      requirements(payTo, 4_999n),
      requirements(payTo, 5_000n, { asset: newPayTo() }),
    ]) {
      consumed((await other.client.post('/settle', settleBody(payment, reqs))).json);
    }
    assert.equal(await findSettlement(stack().facilitator.pool, key), null, 'nothing claimed');
    const res = await owner.client.post('/settle', settleBody(payment, requirements(payTo, 5_000n)));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: res.json.transaction, value: 5_000n }]);
  });

  it("another account asking (another facilitator process) while the owner's transfer is in flight is told to retry, not that it failed", async () => {
    // A second facilitator on the same database: its handler has no run of this authorization in memory.
    const second = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: { FACILITATOR_TASK_QUEUE: 'facilitator-dedupe-second' },
    });
    const payer = await newPayer(100_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value: 5_000n });
    const body = settleBody(payment, requirements(payTo, 5_000n));
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    await provider.send('evm_setAutomine', [false]);
    try {
      const owned = owner.client.post('/settle', body);
      await until('the broadcast', async () =>
        (await findSettlement(stack().facilitator.pool, key))?.status === 'broadcast' ? true : null,
      );
      const meanwhile = await other.client.post('/settle', body, second.url);
      assert.equal(meanwhile.status, 503, JSON.stringify(meanwhile.json));
      await provider.send('evm_mine', []);
      assert.equal((await owned).json.success, true);
      await until('the record', async () =>
        (await findSettlement(stack().facilitator.pool, key))?.status === 'settled' ? true : null,
      );
      consumed((await other.client.post('/settle', body, second.url)).json);
    } finally {
      await provider.send('evm_setAutomine', [true]);
      await second.close();
    }
  });

  it('two accounts racing with one authorization: one settlement, and only its owner learns the transaction', async () => {
    const payer = await newPayer(100_000n);
    const payTo = newPayTo();
    const body = settleBody(await signPayment(payer, { payTo, value: 5_000n }), requirements(payTo, 5_000n));
    const answers = await Promise.all([owner, other, owner, other].map((a) => a.client.post('/settle', body)));
    const transfers = await transfersTo(provider, payTo);
    assert.equal(transfers.length, 1, 'one transfer');
    const byOwner = new Map<TestAccount, boolean[]>();
    [owner, other, owner, other].forEach((a, i) =>
      byOwner.set(a, [...(byOwner.get(a) ?? []), answers[i].json.success === true]),
    );
    const winners = [...byOwner.entries()].filter(([, wins]) => wins.includes(true));
    assert.equal(winners.length, 1, 'exactly one account was answered with the settlement');
    const [winner] = winners[0];
    for (const [i, a] of [owner, other, owner, other].entries()) {
      if (a === winner) assert.equal(answers[i].json.transaction, transfers[0].hash);
      else consumed(answers[i].json);
    }
  });

  it("a refusal of another account racing the owner's claim does not refuse the owner's settlement", async () => {
    const capped = await newAccount('dedupe-capped', { maxPerTx: 1n });
    try {
      for (let round = 0; round < 5; round++) {
        const payer = await newPayer(100_000n);
        const payTo = newPayTo();
        const payment = await signPayment(payer, { payTo, value: 5_000n });
        const body = settleBody(payment, requirements(payTo, 5_000n));
        const [mine, theirs] = await Promise.all([
          owner.client.post('/settle', body),
          capped.client.post('/settle', body),
        ]);
        const transfers = await transfersTo(provider, payTo);
        if (mine.json.success === true) {
          assert.equal(transfers.length, 1);
          assert.equal(mine.json.transaction, transfers[0].hash);
        } else {
          // The capped account's refusal came first: it claimed nothing, so the owner's retry settles.
          assert.equal(transfers.length, 0, JSON.stringify(mine.json));
        }
        // Whatever the order, the owner's retry ends with the one transfer, never a refusal.
        const again = await waitFor(
          async () => {
            const reply = await owner.client.post('/settle', body);
            return reply.status === 503 ? null : reply;
          },
          { timeoutMs: 5_000, everyMs: 250, what: 'the owner’s retry to be answered' },
        );
        assert.equal(again.status, 200, JSON.stringify(again.json));
        assert.equal(again.json.success, true, JSON.stringify(again.json));
        assert.deepEqual(
          (await transfersTo(provider, payTo)).map((t) => t.hash),
          [again.json.transaction],
        );
        assert.notEqual(theirs.json.transaction, again.json.transaction, 'the capped account never learns it');
      }
    } finally {
      await capped.client.close();
    }
  });
});
