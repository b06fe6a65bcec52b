// The facilitator settles x402 `upto` (docs/SETTLEMENT.md, "The upto scheme"): what the
// unmodified @x402/evm upto client signs for the facilitator /supported names is charged the
// actual amount, through the same durable settlement as `exact`. A charge below the maximum moves
// exactly the charge; a replay gets the same transaction and a different charge for the same
// authorization is refused; a charge above the maximum, a revoked allowance or a guardrail moves
// nothing; a charge of 0 is a success with no transaction; a payer without a Permit2 allowance is
// charged through its EIP-2612 permit; two concurrent /settle of one authorization settle once; a
// proxy call reverted because the payer spent its Permit2 nonce itself collected nothing (success
// false); /supported names the gas wallet in a process without its key; a stuck proxy call is
// fee-bumped like an exact transfer; and a settlement claimed by a process that died before its
// workflow start is finished by the sweeper's workflow with the stored bytes.
// Real parts: the stack's anvil (Permit2 and the upto proxy at their canonical addresses), its
// PostgreSQL and Temporal, facilitators over mutual TLS.
import assert from 'node:assert/strict';
import { MaxUint256, Transaction, Wallet, parseEther, type JsonRpcProvider } from 'ethers';
import { PERMIT2_ADDRESS, nonceUsed, permit2Contract } from '../../contracts/permit2.ts';
import { tokenContract } from '../../contracts/token.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { findSettlement, uptoSettlementKey } from '../../facilitator/store/records.ts';
import { signedAttempts } from '../../facilitator/store/gas.ts';
import { uptoAuthorizationUse } from '../../facilitator/upto-chain.ts';
import type { UptoPayment } from '../../x402/schemes/upto/schemas.ts';
import { parseUptoSettleRequest } from '../../x402/schemes/upto/settle-request.ts';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { startFacilitatorStack, until, type FacilitatorStack } from '../support/facilitator.ts';
import { rpcReader, signUptoPayment, UPTO_NETWORK } from '../support/upto.ts';
import {
  claimAsDeadHandler,
  settlementWorkflowResult,
  withOwnFacilitator,
  type OwnFacilitator,
} from '../support/settling.ts';
import {
  balanceOf,
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';

const MAX = 5_000_000n;

describe('facilitator: the upto scheme', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let gateway: TestAccount;

  before(async () => {
    provider = chainProvider();
    gateway = await newAccount('upto-gateway');
  });
  after(async () => {
    await gateway.client.close();
    provider.destroy();
  });

  const token = () => stack().infra.tokenAddress;

  /** A payer holding 10 USDC; `approved`: it approved Permit2 itself (with ETH for that), else it holds no ETH. */
  async function uptoPayer(approved: boolean): Promise<Wallet> {
    const payer = await newPayer(10_000_000n);
    if (!approved) return payer;
    await fund(stack().infra.chainRpcUrl, token(), payer.address, { eth: parseEther('1') });
    await (await tokenContract(token(), payer.connect(provider)).approve(PERMIT2_ADDRESS, MaxUint256)).wait();
    return payer;
  }

  /** What the reference client signs for `payTo` and the facilitator `by` (default the stack's gas wallet). */
  async function signed(payer: Wallet, payTo: string, opts: { sponsoring?: boolean; by?: string } = {}) {
    const { payment } = await signUptoPayment(
      payer.privateKey,
      {
        asset: token(),
        payTo,
        facilitator: opts.by ?? stack().facilitator.gasWallet,
        amount: MAX,
        sponsoring: opts.sponsoring,
      },
      opts.sponsoring ? rpcReader(stack().infra.chainRpcUrl) : undefined,
    );
    return payment;
  }

  /** The x402 v2 settle body: the client's payment, the charge as the requirements' amount. */
  const v2Body = (payment: UptoPayment, charge: bigint) => ({
    x402Version: 2,
    paymentPayload: payment,
    paymentRequirements: {
      scheme: 'upto',
      network: UPTO_NETWORK,
      amount: String(charge),
      asset: payment.accepted.asset,
      payTo: payment.accepted.payTo,
      maxTimeoutSeconds: payment.accepted.maxTimeoutSeconds,
      extra: { name: 'USD Coin', version: '2', facilitatorAddress: stack().facilitator.gasWallet },
    },
  });

  /** The v1-style body (the envelope the gateway sends for `exact`): the charge as maxAmountRequired. */
  const v1Body = (payment: UptoPayment, charge: bigint) => ({
    x402Version: 1,
    paymentPayload: {
      x402Version: 1,
      scheme: 'upto',
      network: 'base',
      payload: payment.payload,
      ...(payment.extensions ? { extensions: payment.extensions } : {}),
    },
    paymentRequirements: {
      scheme: 'upto',
      network: 'base',
      maxAmountRequired: String(charge),
      asset: payment.accepted.asset,
      payTo: payment.accepted.payTo,
      resource: 'https://gateway.test/paid',
      maxTimeoutSeconds: payment.accepted.maxTimeoutSeconds,
      extra: { name: 'USD Coin', version: '2', facilitatorAddress: stack().facilitator.gasWallet },
    },
  });

  const permit2NonceUsed = async (payment: UptoPayment) => {
    const { from, nonce } = payment.payload.permit2Authorization;
    const n = BigInt(nonce);
    return nonceUsed(await permit2Contract(provider).nonceBitmap(from, n >> 8n), n);
  };
  const keyOf = (payment: UptoPayment) =>
    uptoSettlementKey(
      8453,
      token(),
      payment.payload.permit2Authorization.from,
      BigInt(payment.payload.permit2Authorization.nonce),
    );
  const refused = (json: Record<string, unknown>) => {
    assert.equal(json.success, false, JSON.stringify(json));
    assert.equal(json.errorReason, 'settlement_failed');
    assert.equal(json.transaction, undefined);
  };

  it('/supported lists upto beside exact, naming the gas wallet as the facilitator to sign for', async () => {
    const supported = await gateway.client.get('/supported');
    assert.deepEqual(supported.json.kinds.slice(0, 2), [
      { x402Version: 1, scheme: 'exact', network: 'base', asset: token() },
      {
        x402Version: 2,
        scheme: 'upto',
        network: UPTO_NETWORK,
        asset: token(),
        extra: { facilitatorAddress: stack().facilitator.gasWallet },
      },
    ]);
  });

  it('charges exactly the charge (below the maximum) from an approved payer; a replay gets the same transaction, another charge is refused', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const before = await balanceOf(provider, payer.address);

    const res = await gateway.client.post('/settle', v2Body(payment, 1_234_567n));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    assert.match(res.json.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(res.json.network, UPTO_NETWORK);
    assert.equal(res.json.payer, payer.address);
    assert.equal(res.json.amount, '1234567');
    assert.equal(await balanceOf(provider, payTo), 1_234_567n);
    assert.equal(await balanceOf(provider, payer.address), before - 1_234_567n);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: res.json.transaction, value: 1_234_567n }]);
    // The answer may come before the record's last write (inclusion seen, the record then updated).
    const record = await waitFor(async () => {
      const found = await findSettlement(stack().facilitator.pool, keyOf(payment));
      return found?.status === 'settled' && found;
    });
    assert.equal(record.amount, 1_234_567n);

    const again = await gateway.client.post('/settle', v2Body(payment, 1_234_567n));
    assert.equal(again.json.transaction, res.json.transaction, 'the replay gets the same transaction');
    // The first charge wins: another charge of the same authorization is not that settlement.
    refused((await gateway.client.post('/settle', v2Body(payment, 1_000n))).json);
    assert.equal(await balanceOf(provider, payTo), 1_234_567n, 'nothing more moved');
  });

  it('a payer without a Permit2 allowance is charged through its EIP-2612 permit, sent in the v1-style envelope', async () => {
    const payer = await uptoPayer(false);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo, { sponsoring: true });
    assert.ok(payment.extensions?.eip2612GasSponsoring, 'the client signed a permit');

    const res = await gateway.client.post('/settle', v1Body(payment, 2_000_000n));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    assert.equal(res.json.network, 'base');
    assert.equal(res.json.amount, '2000000');
    assert.equal(await balanceOf(provider, payTo), 2_000_000n);
    assert.equal(await balanceOf(provider, payer.address), 8_000_000n);
    // The permit approved Permit2 for the maximum; the charge was spent from it.
    assert.equal(await tokenContract(token(), provider).allowance(payer.address, PERMIT2_ADDRESS), MAX - 2_000_000n);
  });

  it('a charge above the signed maximum is refused, and nothing moves', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const res = await gateway.client.post('/settle', v2Body(payment, MAX + 1n));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    refused(res.json);
    assert.equal(await balanceOf(provider, payTo), 0n);
    assert.equal(await permit2NonceUsed(payment), false, 'the authorization is still unused');
    assert.equal(await findSettlement(stack().facilitator.pool, keyOf(payment)), null, 'nothing claimed');
  });

  it('a charge of 0 moves nothing: a success without a transaction, recorded', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const res = await gateway.client.post('/settle', v2Body(payment, 0n));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.deepEqual(res.json, {
      success: true,
      transaction: '',
      network: UPTO_NETWORK,
      payer: payer.address,
      amount: '0',
    });
    assert.equal(await balanceOf(provider, payTo), 0n);
    assert.equal(await permit2NonceUsed(payment), false);
    const record = (await findSettlement(stack().facilitator.pool, keyOf(payment)))!;
    assert.equal(record.status, 'settled');
    assert.equal(record.txHash, null);
    assert.equal(record.amount, 0n);
    assert.deepEqual((await gateway.client.post('/settle', v2Body(payment, 0n))).json, res.json);
  });

  it("the guardrails apply to the charge: over the account's per-transaction maximum is a 429, and nothing moves", async () => {
    const limited = await newAccount('upto-limited', { maxPerTx: 1_000_000n });
    try {
      const payer = await uptoPayer(true);
      const payTo = newPayTo();
      const payment = await signed(payer, payTo);
      // The signed maximum (5 USDC) is over the limit; only the charge counts.
      const over = await limited.client.post('/settle', v2Body(payment, 1_500_000n));
      assert.equal(over.status, 429, JSON.stringify(over.json));
      assert.equal(await balanceOf(provider, payTo), 0n);
      const within = await limited.client.post('/settle', v2Body(payment, 900_000n));
      assert.equal(within.json.success, true, JSON.stringify(within.json));
      assert.equal(await balanceOf(provider, payTo), 900_000n);
    } finally {
      await limited.client.close();
    }
  });

  it('an allowance revoked after the payment was signed (and verified): refused, and nothing moves', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    await (await tokenContract(token(), payer.connect(provider)).approve(PERMIT2_ADDRESS, 0n)).wait();
    const res = await gateway.client.post('/settle', v2Body(payment, 1_000_000n));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    refused(res.json);
    assert.equal(await balanceOf(provider, payTo), 0n);
    assert.equal(await permit2NonceUsed(payment), false);
    assert.equal((await findSettlement(stack().facilitator.pool, keyOf(payment)))?.status, 'failed');
  });

  it('two concurrent /settle of one authorization settle it once, both answered with its transaction', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const body = v2Body(payment, 700_000n);
    const [a, b] = await Promise.all([gateway.client.post('/settle', body), gateway.client.post('/settle', body)]);
    assert.equal(a.json.success, true, JSON.stringify(a.json));
    assert.equal(b.json.success, true, JSON.stringify(b.json));
    assert.equal(a.json.transaction, b.json.transaction);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: a.json.transaction, value: 700_000n }]);
  });

  it('what the chain says of a Permit2 nonce: unused; used and paid by the proxy call that charged it; used for another amount, not paid', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const nonce = BigInt(payment.payload.permit2Authorization.nonce);
    const use = async (amount: bigint) =>
      uptoAuthorizationUse(
        provider,
        token(),
        { payer: payer.address, nonce, payTo, amount },
        await provider.getBlockNumber(),
      );
    assert.deepEqual(await use(300_000n), { used: false });
    const res = await gateway.client.post('/settle', v2Body(payment, 300_000n));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    const paid = await use(300_000n);
    assert.ok(paid.used && paid.paid?.txHash === res.json.transaction, JSON.stringify(paid));
    assert.deepEqual(await use(300_001n), { used: true, paid: null });
  });

  it('the payer spends the Permit2 nonce itself before the proxy call is mined: the call reverts, nothing was collected, so success false', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const payment = await signed(payer, payTo);
    const key = keyOf(payment);
    const nonce = BigInt(payment.payload.permit2Authorization.nonce);
    await provider.send('evm_setAutomine', [false]);
    try {
      const inFlight = gateway.client.post('/settle', v2Body(payment, 400_000n));
      const sent = await until('the facilitator’s broadcast', async () => {
        const record = await findSettlement(stack().facilitator.pool, key);
        return record?.txHash && (await provider.getTransaction(record.txHash)) ? record : null;
      });
      const ours = Transaction.from(sent.rawTx!);
      // The payer invalidates the nonce, with far higher fees: mined first in the same block.
      const invalidation = await permit2Contract(payer.connect(provider)).invalidateUnorderedNonces(
        nonce >> 8n,
        1n << (nonce & 0xffn),
        {
          gasLimit: 100_000n,
          maxPriorityFeePerGas: ours.maxPriorityFeePerGas! * 10n,
          maxFeePerGas: ours.maxFeePerGas! * 10n,
        },
      );
      await provider.send('evm_mine', []);
      await provider.send('evm_setAutomine', [true]);
      assert.equal((await invalidation.wait())?.status, 1);
      assert.equal((await provider.getTransactionReceipt(sent.txHash!))?.status, 0, 'the proxy call reverted');
      const answer = await inFlight;
      assert.equal(answer.status, 200, JSON.stringify(answer.json));
      assert.equal(answer.json.success, false, 'not collected: the call must not be served');
      assert.equal(answer.json.transaction, sent.txHash);
      assert.equal(await balanceOf(provider, payTo), 0n);
      const record = await findSettlement(stack().facilitator.pool, key);
      assert.equal(record?.status, 'failed');
      assert.equal(record?.failureCause, 'reverted');
    } finally {
      await provider.send('evm_setAutomine', [true]);
    }
  });

  it('/supported names the gas wallet without its key (FACILITATOR_EMBEDDED_WORKER=false: the keystore’s address)', async () => {
    const noKey = await startFacilitatorStack(stack().infra, stack().temporal, {
      inProcessWorker: false,
      overrides: { FACILITATOR_TASK_QUEUE: 'facilitator-upto-no-key' },
    });
    try {
      const supported = (await gateway.client.get('/supported', noKey.url)).json;
      assert.deepEqual(supported.kinds[1].extra, { facilitatorAddress: noKey.gasWallet });
    } finally {
      await noKey.close();
    }
  });

  describe('a stuck proxy call', () => {
    let own: OwnFacilitator;
    withOwnFacilitator(
      'upto-fee-bump',
      {
        FACILITATOR_FEE_BUMP_AFTER_MS: '700',
        FACILITATOR_FEE_BUMP_PERCENT: '20',
        FACILITATOR_MAX_FEE_BUMPS: '3',
        FACILITATOR_SETTLE_DEADLINE_MS: '20000',
        FACILITATOR_INCLUSION_TIMEOUT_MS: '15000',
      },
      (started) => (own = started),
    );

    it('is re-signed at the same gas nonce with higher fees until one attempt is mined: the charge moves once', async () => {
      const payer = await uptoPayer(true);
      const payTo = newPayTo();
      const payment = await signed(payer, payTo, { by: own.facilitator.gasWallet });
      const key = keyOf(payment);
      await provider.send('evm_setAutomine', [false]);
      let answer;
      try {
        const inFlight = own.gateway.client.post('/settle', v2Body(payment, 800_000n), own.facilitator.url);
        const attempts = await until('a fee bump', async () => {
          const stored = await signedAttempts(own.facilitator.pool, key);
          return stored.length >= 2 ? stored : null;
        });
        const [first, bump] = attempts.map((a) => Transaction.from(a.rawTx));
        assert.equal(bump.nonce, first.nonce, 'the same gas nonce');
        assert.equal(bump.data, first.data, 'the same proxy call');
        assert.ok(bump.maxFeePerGas! > first.maxFeePerGas!, 'higher fees');
        await until('the node holding the bump', async () =>
          (await provider.getTransaction(attempts[1].txHash)) ? true : null,
        );
        await provider.send('evm_mine', []);
        await provider.send('evm_setAutomine', [true]);
        answer = await inFlight;
      } finally {
        await provider.send('evm_setAutomine', [true]);
      }
      assert.equal(answer.json.success, true, JSON.stringify(answer.json));
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: answer.json.transaction, value: 800_000n }]);
      const all = await signedAttempts(own.facilitator.pool, key);
      assert.ok(
        all.some((a) => a.txHash === answer.json.transaction && a.seq >= 1),
        'a bump was mined',
      );
    });
  });

  describe('the sweeper', () => {
    let facilitator: FacilitatorStack;
    before(async () => {
      facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        overrides: {
          FACILITATOR_TASK_QUEUE: 'facilitator-upto-sweeper',
          FACILITATOR_SWEEP_EVERY_MS: '200',
          FACILITATOR_SWEEP_AFTER_MS: '500',
        },
      });
    });
    after(() => facilitator?.close());

    it('an upto settlement claimed and signed by a process that died before its workflow start: its workflow sends the stored bytes once', async () => {
      const payer = await uptoPayer(true);
      const payTo = newPayTo();
      const payment = await signed(payer, payTo, { by: facilitator.gasWallet });
      const request = parseUptoSettleRequest(v2Body(payment, 600_000n))!;
      const key = keyOf(payment);
      // What the dead handler committed: the request, then the claim with the signed proxy call.
      await claimAsDeadHandler(facilitator, gateway.account, key, request);
      const stored = (await findSettlement(facilitator.pool, key))!;
      assert.equal(await provider.getTransaction(stored.txHash!), null, 'nothing sent yet');

      const outcome = await settlementWorkflowResult(key);
      assert.equal(outcome.status, 'settled');
      assert.equal(outcome.transaction, stored.txHash, 'the stored transaction, not a new one');
      assert.equal((await findSettlement(facilitator.pool, key))?.attempts, 1, 'sent once');
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: stored.txHash, value: 600_000n }]);
      // A /settle of the same authorization now answers from the record.
      const res = await gateway.client.post('/settle', v2Body(payment, 600_000n), facilitator.url);
      assert.equal(res.json.transaction, stored.txHash);
    });
  });
});
