// The facilitator settles x402 `batch-settlement` (docs/SETTLEMENT.md, "The batch-settlement
// scheme"): /supported names its receiver authorizer, and channels that delegate that role to it
// are deposited into, claimed, settled and refunded through the same durable settlement as
// `exact`. A deposit the unmodified @x402/evm client signs is pulled through the ERC-3009
// collector, once however often it is replayed; the facilitator signs one claim batch for the
// vouchers of two channels and sends it in one transaction (again: the same transaction,
// nothing more claimed; an older voucher: settled with no transaction); a claim whose voucher the payer did not sign is refused and nothing
// moves; settle sweeps the claimed total to the receiver; a refund first claims the payer's
// zero-charge voucher, then returns the rest of the escrow, asked only by the account whose
// deposit into the channel was settled here. Each runs as a SettlementWorkflow;
// an account's per-transaction maximum refuses a deposit above it. A facilitator not opted in
// lists no such kind.
// Real parts: the stack's anvil (the channel contract and its collector at their canonical
// addresses), its PostgreSQL and Temporal, facilitators over mutual TLS.
import assert from 'node:assert/strict';
import { Wallet, parseEther, type JsonRpcProvider } from 'ethers';
import { tokenContract } from '../../contracts/token.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { batchSettlementContract } from '../../contracts/batch-settlement.ts';
import type { BatchSettlementPayment } from '../../x402/schemes/batch-settlement/schemas.ts';
import { voucherDigest } from '../../x402/schemes/batch-settlement/typed-data.ts';
import { stack } from '../support/stack.ts';
import { startFacilitatorStack } from '../support/facilitator.ts';
import { settlementWorkflowResult } from '../support/settling.ts';
import { batchActionKey, NEW_SETTLEMENT_COLUMNS, newSettlementValues } from '../../facilitator/store/records.ts';
import { parseBatchSettleRequest } from '../../x402/schemes/batch-settlement/settle-request.ts';
import { claimBatchDigestOf } from '../../facilitator/settlement/verify-batch.ts';
import { batchPayer, type BatchTerms } from '../support/batch-settlement.ts';
import { balanceOf, chainProvider, newAccount, newPayTo, newPayer, type TestAccount } from '../support/x402.ts';

const PRICE = 1_000n;
const DEPOSIT = 10_000n;
const NETWORK = 'eip155:8453';

type Payload = BatchSettlementPayment['payload'];

describe('facilitator: the batch-settlement scheme', function () {
  this.timeout(120_000);
  let provider: JsonRpcProvider;
  let gateway: TestAccount;

  before(async () => {
    provider = chainProvider();
    gateway = await newAccount('batch-gateway');
  });
  after(async () => {
    await gateway.client.close();
    provider.destroy();
  });

  const token = () => stack().infra.tokenAddress;
  const authorizer = () => stack().infra.receiverAuthorizer.address;
  const channels = () => batchSettlementContract(provider);
  const channel = async (channelId: string): Promise<[bigint, bigint]> => {
    const [balance, totalClaimed] = await channels().channels!(channelId);
    return [balance, totalClaimed];
  };

  /** The x402 v2 settle body: an action as the payload, requirements as the server sends them. */
  const body = (payload: unknown, terms: { payTo: string; amount?: bigint }) => ({
    x402Version: 2,
    paymentPayload: {
      x402Version: 2,
      accepted: { scheme: 'batch-settlement', network: NETWORK, asset: token(), amount: '0', payTo: terms.payTo },
      payload,
    },
    paymentRequirements: {
      scheme: 'batch-settlement',
      network: NETWORK,
      asset: token(),
      amount: String(terms.amount ?? 0n),
      payTo: terms.payTo,
      maxTimeoutSeconds: 300,
      extra: { name: 'USD Coin', version: '2', receiverAuthorizer: authorizer(), withdrawDelay: 900 },
    },
  });

  /** A payer with 20 USDC and its channel to `payTo`, which names the facilitator's receiver authorizer. */
  async function openChannel(payTo: string) {
    const wallet = await newPayer(2n * DEPOSIT);
    const terms: BatchTerms = {
      asset: token(),
      payTo,
      receiverAuthorizer: authorizer(),
      amount: PRICE,
      minDeposit: DEPOSIT,
    };
    const payer = batchPayer(wallet.privateKey);
    const deposit = await payer.pay(terms);
    assert.equal(deposit.payload.type, 'deposit');
    return { wallet, terms, payer, deposit, channelId: deposit.payload.voucher.channelId.toLowerCase() };
  }

  /** The client's next voucher, once the server told it what it was charged so far. */
  async function nextVoucher(opened: Awaited<ReturnType<typeof openChannel>>, charged: bigint) {
    await opened.payer.record(opened.channelId, { balance: DEPOSIT, charged });
    return (await opened.payer.pay(opened.terms)).payload;
  }

  const fundEth = (address: string) => fund(stack().infra.chainRpcUrl, token(), address, { eth: parseEther('1') });

  const claimRow = (payload: Payload, totalClaimed: bigint) => ({
    voucher: { channel: payload.channelConfig, maxClaimableAmount: payload.voucher.maxClaimableAmount },
    signature: payload.voucher.signature,
    totalClaimed: String(totalClaimed),
  });

  /** A claim's settlement key without its day: the facilitator adds the UTC day it was asked on. */
  const claimKeyPrefix = (receiver: string, claims: Parameters<typeof claimBatchDigestOf>[1]) =>
    batchActionKey(8453, token(), receiver, 'claim', `${claimBatchDigestOf(8453, claims)}-`);
  /** The keys the facilitator stored a request of this claim under, with what refused each (null: none). */
  const storedClaims = async (receiver: string, claims: Parameters<typeof claimBatchDigestOf>[1]) =>
    (
      await stack().facilitator.pool.query<{ settlement_key: string; refused_cause: string | null }>(
        `select settlement_key, refused_cause from settle_requests where starts_with(settlement_key, $1)`,
        [claimKeyPrefix(receiver, claims)],
      )
    ).rows;
  /** PostgreSQL's UTC day, and the day before: the days the facilitator names claims by. */
  const utcDays = async () =>
    (
      await stack().facilitator.pool.query<{ today: string; yesterday: string }>(
        `select (now() at time zone 'utc')::date::text as today, ((now() at time zone 'utc')::date - 1)::text as yesterday`,
      )
    ).rows[0]!;

  const settled = (res: { status: number; json: any }) => {
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.success, true, JSON.stringify(res.json));
    assert.equal(res.json.network, NETWORK);
    return res.json;
  };

  it('/supported names the receiver authorizer the channels delegate to, and the gas wallet that relays', async () => {
    const supported = (await gateway.client.get('/supported')).json;
    const kind = supported.kinds.find((k: { scheme: string }) => k.scheme === 'batch-settlement');
    assert.deepEqual(kind, {
      x402Version: 2,
      scheme: 'batch-settlement',
      network: NETWORK,
      asset: token(),
      extra: { receiverAuthorizer: authorizer() },
    });
    assert.deepEqual(supported.signers, { 'eip155:*': [stack().facilitator.gasWallet] });
  });

  it('deposits once, claims two channels in one transaction, refuses a voucher the payer did not sign, settles and refunds', async () => {
    const receiver = newPayTo();
    const a = await openChannel(receiver);
    const b = await openChannel(receiver);

    // Deposits: the client's payload, pulled through the collector; a replay settles nothing more.
    const depositA = settled(
      await gateway.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE })),
    );
    assert.match(depositA.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(depositA.payer, a.wallet.address);
    assert.equal(depositA.amount, String(DEPOSIT));
    assert.deepEqual(depositA.extra.channelState, {
      channelId: a.channelId,
      balance: String(DEPOSIT),
      totalClaimed: '0',
      withdrawRequestedAt: 0,
      refundNonce: '0',
    });
    const replay = settled(
      await gateway.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE })),
    );
    assert.equal(replay.transaction, depositA.transaction);
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 0n]);
    assert.equal(await balanceOf(provider, a.wallet.address), DEPOSIT);
    settled(await gateway.client.post('/settle', body(b.deposit.payload, { payTo: receiver, amount: PRICE })));
    assert.deepEqual(await channel(b.channelId), [DEPOSIT, 0n]);

    // Vouchers: A's second call (2000 in all), B's first (1000); one claim of both, one transaction.
    const a2 = await nextVoucher(a, PRICE);
    assert.equal(a2.voucher.maxClaimableAmount, '2000');
    const claim = { type: 'claim', claims: [claimRow(a2, 2n * PRICE), claimRow(b.deposit.payload, PRICE)] };
    const claimed = settled(await gateway.client.post('/settle', body(claim, { payTo: receiver })));
    assert.match(claimed.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(claimed.amount, '');
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
    assert.deepEqual(await channel(b.channelId), [DEPOSIT, PRICE]);
    const receipt = (await provider.getTransactionReceipt(claimed.transaction))!;
    const claimedTopic = channels().interface.getEvent('Claimed')!.topicHash;
    assert.deepEqual(
      receipt.logs.filter((log) => log.topics[0] === claimedTopic).map((log) => log.topics[1]),
      [a.channelId, b.channelId],
      'both channels claimed by the one transaction',
    );
    // Its settlement ran as a SettlementWorkflow, named by the batch's ClaimBatch digest.
    const [stored] = await storedClaims(receiver, claim.claims);
    assert.ok(stored!.settlement_key.endsWith(`-${(await utcDays()).today}`), stored!.settlement_key);
    const workflow = await settlementWorkflowResult(stored!.settlement_key);
    assert.equal(workflow.status, 'settled');
    assert.equal(workflow.transaction, claimed.transaction);
    // The same claim again: the same settlement, nothing more claimed.
    const again = settled(await gateway.client.post('/settle', body(claim, { payTo: receiver })));
    assert.equal(again.transaction, claimed.transaction);
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
    // A's older voucher (1000): claims are cumulative, the chain holds more already; settled with
    // no transaction, and nothing signed or sent.
    const gasNonce = await provider.getTransactionCount(stack().facilitator.gasWallet, 'pending');
    const older = { type: 'claim', claims: [claimRow(a.deposit.payload, PRICE)] };
    const nothing = settled(await gateway.client.post('/settle', body(older, { payTo: receiver })));
    assert.equal(nothing.transaction, '');
    assert.equal(await provider.getTransactionCount(stack().facilitator.gasWallet, 'pending'), gasNonce);
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);

    // A voucher for 3000 on A's channel signed by another key: refused, nothing claimed, with
    // B's valid row beside it or not.
    const forger = Wallet.createRandom();
    const forged = {
      ...claimRow(a2, 3n * PRICE),
      voucher: { channel: a2.channelConfig, maxClaimableAmount: String(3n * PRICE) },
      signature: forger.signingKey.sign(voucherDigest(8453, a.channelId, 3n * PRICE)).serialized,
    };
    for (const claims of [[forged], [claimRow(b.deposit.payload, PRICE), forged]]) {
      const refused = await gateway.client.post('/settle', body({ type: 'claim', claims }, { payTo: receiver }));
      assert.equal(refused.status, 200, JSON.stringify(refused.json));
      assert.equal(refused.json.success, false);
      assert.equal(refused.json.errorReason, 'settlement_failed');
      assert.equal(refused.json.transaction, undefined);
    }
    // Nor beyond the voucher's ceiling: the payer signed for 2000 only.
    const over = await gateway.client.post(
      '/settle',
      body({ type: 'claim', claims: [claimRow(a2, 2n * PRICE + 1n)] }, { payTo: receiver }),
    );
    assert.equal(over.json.success, false);
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
    const [claimedTotal, settledTotal] = await channels().receivers!(receiver, token());
    assert.deepEqual([claimedTotal, settledTotal], [3n * PRICE, 0n]);

    // Settle: what both claims credited goes to the receiver; a replay is the same settlement.
    const sweep = { type: 'settle', receiver, token: token() };
    const swept = settled(await gateway.client.post('/settle', body(sweep, { payTo: receiver })));
    assert.equal(swept.amount, String(3n * PRICE));
    assert.equal(await balanceOf(provider, receiver), 3n * PRICE);
    const sweptAgain = settled(await gateway.client.post('/settle', body(sweep, { payTo: receiver })));
    assert.equal(sweptAgain.transaction, swept.transaction);
    assert.equal(await balanceOf(provider, receiver), 3n * PRICE);

    // Refund of A: the client's zero-charge voucher for what it was charged (2500, 500 more than
    // claimed), all of the rest asked back. The facilitator claims the 2500 first, in the same
    // transaction, then returns 7500.
    await a.payer.record(a.channelId, { balance: DEPOSIT, charged: 2n * PRICE + 500n });
    const asked = (await a.payer.refund(a.terms)).payload;
    assert.equal(asked.type, 'refund');
    // As the server completes it: the channel's refund nonce (the amount left out: all of it).
    const refund = { ...asked, refundNonce: '0' };
    // Asked by an account whose deposit into the channel this facilitator did not settle: refused,
    // nothing moves (the facilitator signs refunds for the receiver's server only).
    const other = await newAccount('batch-other');
    try {
      const refused = await other.client.post('/settle', body(refund, { payTo: receiver }));
      assert.equal(refused.json.success, false, JSON.stringify(refused.json));
      assert.equal(refused.json.transaction, undefined);
    } finally {
      await other.client.close();
    }
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
    const refunded = settled(await gateway.client.post('/settle', body(refund, { payTo: receiver })));
    assert.equal(refunded.payer, a.wallet.address);
    assert.equal(refunded.amount, '7500');
    assert.deepEqual(refunded.extra.channelState, {
      channelId: a.channelId,
      balance: '2500',
      totalClaimed: '2500',
      withdrawRequestedAt: 0,
      refundNonce: '1',
    });
    assert.equal(await balanceOf(provider, a.wallet.address), DEPOSIT + 7_500n);
    // Its replay is the same settlement: refunded once.
    const refundedAgain = settled(await gateway.client.post('/settle', body(refund, { payTo: receiver })));
    assert.equal(refundedAgain.transaction, refunded.transaction);
    assert.equal(await balanceOf(provider, a.wallet.address), DEPOSIT + 7_500n);
  });

  it('/verify checks a deposit, a voucher and a refund against the chain and names the channel’s state; nothing moves', async () => {
    const receiver = newPayTo();
    const a = await openChannel(receiver);
    const verify = (payload: unknown, amount = PRICE) =>
      gateway.client.post('/verify', body(payload, { payTo: receiver, amount }));
    const state = (balance: bigint, totalClaimed = 0n) => ({
      channelId: a.channelId,
      balance: String(balance),
      totalClaimed: String(totalClaimed),
      withdrawRequestedAt: 0,
      refundNonce: '0',
    });

    const deposit = await verify(a.deposit.payload);
    assert.equal(deposit.status, 200, JSON.stringify(deposit.json));
    assert.deepEqual(deposit.json, { isValid: true, payer: a.wallet.address, extra: state(0n) });
    assert.deepEqual(await channel(a.channelId), [0n, 0n], 'verified, not deposited');
    // The payer without the deposit's funds: the chain says no.
    const poor = await openChannel(receiver);
    const payerWallet = poor.wallet.connect(provider);
    await fundEth(payerWallet.address);
    await (await tokenContract(token(), payerWallet).transfer(receiver, 2n * DEPOSIT)).wait();
    const broke = await verify(poor.deposit.payload);
    assert.equal(broke.json.isValid, false);
    assert.equal(broke.json.invalidReason, 'invalid_batch_settlement_evm_insufficient_balance');

    settled(await gateway.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE })));
    const a2 = await nextVoucher(a, PRICE);
    assert.deepEqual((await verify(a2)).json, { isValid: true, payer: a.wallet.address, extra: state(DEPOSIT) });
    const forged = {
      ...a2,
      voucher: {
        ...a2.voucher,
        signature: Wallet.createRandom().signingKey.sign(voucherDigest(8453, a.channelId, 2n * PRICE)).serialized,
      },
    };
    assert.deepEqual((await verify(forged)).json, {
      isValid: false,
      invalidReason: 'invalid_batch_settlement_evm_voucher_signature',
      payer: a.wallet.address,
    });
    await a.payer.record(a.channelId, { balance: DEPOSIT, charged: PRICE });
    const refund = (await a.payer.refund(a.terms)).payload;
    assert.deepEqual((await verify(refund, 0n)).json, {
      isValid: true,
      payer: a.wallet.address,
      extra: state(DEPOSIT),
    });
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 0n]);
  });

  it('the account’s limits apply to what a deposit moves: over its per-transaction maximum, 429 and nothing moves', async () => {
    const small = await newAccount('batch-small', { maxPerTx: DEPOSIT - 1n });
    try {
      const receiver = newPayTo();
      const a = await openChannel(receiver);
      const res = await small.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE }));
      assert.equal(res.status, 429, JSON.stringify(res.json));
      assert.deepEqual(await channel(a.channelId), [0n, 0n]);
      assert.equal(await balanceOf(provider, a.wallet.address), 2n * DEPOSIT);
    } finally {
      await small.client.close();
    }
  });

  it('an account whose payers spent its failed-gas budget still claims and settles; what payers sign waits for the next day', async () => {
    const spender = await newAccount('batch-spent-gas');
    const pool = stack().facilitator.pool;
    const today = `account_id = $1 and day = (now() at time zone 'utc')::date`;
    try {
      const receiver = newPayTo();
      const a = await openChannel(receiver);
      settled(await spender.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE })));
      // The payers' budget as their reverts leave it (facilitator-gas-budget.test.ts): spent, past any budget.
      const burned = 10n ** 30n;
      await pool.query(`update daily_usage set failed_gas_wei = $2 where ${today}`, [
        spender.account.id,
        burned.toString(),
      ]);

      // What a payer signs is refused before anything is claimed: a deposit moves nothing.
      const b = await openChannel(receiver);
      const deposit = await spender.client.post('/settle', body(b.deposit.payload, { payTo: receiver, amount: PRICE }));
      assert.equal(deposit.status, 429, JSON.stringify(deposit.json));
      assert.deepEqual(deposit.json, { error: 'settlement limit exceeded' });
      assert.deepEqual(await channel(b.channelId), [0n, 0n]);

      // The account's own claim and settle go on chain: a payer's reverts never stop what must be
      // claimed before its timed withdrawal can finalize.
      const a2 = await nextVoucher(a, PRICE);
      const claim = { type: 'claim', claims: [claimRow(a2, 2n * PRICE)] };
      const claimed = settled(await spender.client.post('/settle', body(claim, { payTo: receiver })));
      assert.match(claimed.transaction, /^0x[0-9a-f]{64}$/);
      assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
      const sweep = { type: 'settle', receiver, token: token() };
      const swept = settled(await spender.client.post('/settle', body(sweep, { payTo: receiver })));
      assert.equal(swept.amount, String(2n * PRICE));
      assert.equal(await balanceOf(provider, receiver), 2n * PRICE);

      // A refund the payer asks for is the payers' too: refused, the escrow stays.
      await a.payer.record(a.channelId, { balance: DEPOSIT, charged: 2n * PRICE });
      const asked = (await a.payer.refund(a.terms)).payload;
      const refund = await spender.client.post('/settle', body({ ...asked, refundNonce: '0' }, { payTo: receiver }));
      assert.equal(refund.status, 429, JSON.stringify(refund.json));
      assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);

      // The claim's and the settle's gas was held against the account's own budget, and given
      // back with their outcomes; the payers' budget is as it was.
      const { rows } = await pool.query(
        `select failed_gas_wei::text, gas_at_risk_wei::text, own_failed_gas_wei::text, own_gas_at_risk_wei::text
           from daily_usage where ${today}`,
        [spender.account.id],
      );
      assert.deepEqual(rows, [
        { failed_gas_wei: burned.toString(), gas_at_risk_wei: '0', own_failed_gas_wei: '0', own_gas_at_risk_wei: '0' },
      ]);
      const own = await pool.query(`select own_gas from settlements where tx_hash in ($1, $2) order by own_gas`, [
        claimed.transaction,
        swept.transaction,
      ]);
      assert.deepEqual(
        own.rows.map((r) => r.own_gas),
        [true, true],
      );

      // The account's own budget spent too: its next claim is refused, and the refusal, kept for
      // the claim's key, names the day it was asked on: the same batch asked for the next day is
      // another settlement, not this refusal again.
      await pool.query(`update daily_usage set own_failed_gas_wei = $2 where ${today}`, [
        spender.account.id,
        burned.toString(),
      ]);
      const a3 = await nextVoucher(a, 2n * PRICE);
      const next = { type: 'claim', claims: [claimRow(a3, 3n * PRICE)] };
      const refusedClaim = await spender.client.post('/settle', body(next, { payTo: receiver }));
      assert.equal(refusedClaim.status, 429, JSON.stringify(refusedClaim.json));
      assert.deepEqual(await channel(a.channelId), [DEPOSIT, 2n * PRICE]);
      assert.deepEqual(await storedClaims(receiver, next.claims), [
        {
          settlement_key: `${claimKeyPrefix(receiver, next.claims)}${(await utcDays()).today}`,
          refused_cause: 'over_failed_gas_budget',
        },
      ]);
    } finally {
      await spender.client.close();
    }
  });

  it('a claim asked again the day after the one it repeats was settled is that settlement: nothing sent again', async () => {
    const receiver = newPayTo();
    const a = await openChannel(receiver);
    settled(await gateway.client.post('/settle', body(a.deposit.payload, { payTo: receiver, amount: PRICE })));
    const a2 = await nextVoucher(a, PRICE);
    const claim = { type: 'claim', claims: [claimRow(a2, 2n * PRICE)] };
    // The claim as midnight leaves it: asked the day before and settled then (here with no
    // transaction, as a claim the chain already held is), its request and record stored under
    // that day's key.
    const { yesterday } = await utcDays();
    const key = `${claimKeyPrefix(receiver, claim.claims)}${yesterday}`;
    const pool = stack().facilitator.pool;
    await pool.query(`insert into settle_requests (settlement_key, account_id, request) values ($1, $2, $3::jsonb)`, [
      key,
      gateway.account.id,
      JSON.stringify(parseBatchSettleRequest(body(claim, { payTo: receiver }))),
    ]);
    await pool.query(
      `insert into settlements (${NEW_SETTLEMENT_COLUMNS}, status, completed_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'settled', now())`,
      newSettlementValues({
        key,
        accountId: gateway.account.id,
        payer: receiver,
        payTo: receiver,
        amount: 0n,
        validBefore: 0n,
      }),
    );
    const gasNonce = await provider.getTransactionCount(stack().facilitator.gasWallet, 'pending');
    const again = settled(await gateway.client.post('/settle', body(claim, { payTo: receiver })));
    assert.equal(again.transaction, '', 'the day before’s settlement’s answer');
    assert.equal(await provider.getTransactionCount(stack().facilitator.gasWallet, 'pending'), gasNonce);
    assert.deepEqual(await channel(a.channelId), [DEPOSIT, 0n], 'nothing claimed again');
    assert.deepEqual(
      (await storedClaims(receiver, claim.claims)).map((r) => r.settlement_key),
      [key],
      'no settlement of today',
    );
  });

  it('a facilitator not opted in lists no batch-settlement kind and no signers', async () => {
    const off = await startFacilitatorStack(stack().infra, stack().temporal, {
      inProcessWorker: false,
      overrides: { FACILITATOR_TASK_QUEUE: 'facilitator-batch-off', FACILITATOR_EXTRA_SCHEMES: 'upto' },
    });
    try {
      const supported = (await gateway.client.get('/supported', off.url)).json;
      assert.deepEqual(
        supported.kinds.map((k: { scheme: string }) => k.scheme),
        ['exact', 'upto'],
      );
      assert.equal(supported.signers, undefined);
    } finally {
      await off.close();
    }
  });
});
