// A settlement whose worker died after the claim and before signing is resumed by the next
// /settle of the same authorization, and settles even when the daily ceiling is exactly full
// (its own reservation is what fills it). Found by the settle-kill chaos scenario, whose
// account ceiling is exactly its 20 amounts: resumed runs claimed again, met the full ceiling
// and were refused (429), leaving their records claimed forever.
// The crash state is made with the facilitator's own claim statement (reserveNonce, as the
// worker runs it), standing in for a worker killed right after it; everything else is the
// real stack.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
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
import { reserveNonce } from '../../facilitator/store/reservations.ts';
import { settlementKey } from '../../facilitator/store/records.ts';
import { finalRecord } from '../support/facilitator.ts';

describe('a settlement claimed before a crash', function () {
  this.timeout(60_000);
  let provider: ReturnType<typeof chainProvider>;
  let account: TestAccount;
  const value = 70_000n;

  before(async () => {
    provider = chainProvider();
    // The ceiling holds exactly one payment.
    account = await newAccount(`resume-${randomUUID()}`, { dailyCeiling: value });
  });
  after(async () => {
    await account.client.close();
    provider.destroy();
  });

  it('settles when resumed with the daily ceiling exactly full, its reservation counted once', async () => {
    const payer = await newPayer(1_000_000n);
    const payTo = newPayTo();
    const payment = await signPayment(payer, { payTo, value });
    const key = settlementKey(8453, stack().infra.tokenAddress, payer.address, payment.payload.authorization.nonce);
    const reserved = await reserveNonce(stack().facilitator.pool, {
      key,
      account: account.account,
      kind: { network: 'base', asset: stack().infra.tokenAddress },
      payer: payer.address,
      payTo,
      amount: value,
      validBefore: BigInt(payment.payload.authorization.validBefore),
      defaults: stack().facilitator.config.guardrails,
      gasAtRiskWei: 0n,
    });
    assert.ok(
      'reserved' in reserved && reserved.reserved.status === 'claimed' && !reserved.reserved.rawTx,
      'claimed, nothing signed',
    );

    const res = await account.client.post('/settle', settleBody(payment, requirements(payTo, value)));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: res.json.transaction, value }]);
    assert.equal(await balanceOf(provider, payTo), value);
    assert.equal((await finalRecord(stack().facilitator.pool, key)).status, 'settled');
    const { rows } = await stack().facilitator.pool.query<{ reserved: string }>(
      'select reserved::text from daily_usage where account_id = $1',
      [account.account.id],
    );
    assert.deepEqual(rows, [{ reserved: String(value) }], 'reserved once');
  });
});
