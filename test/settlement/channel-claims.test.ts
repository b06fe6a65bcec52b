// The gateway claims what it charged on batch-settlement channels and sweeps it to the receivers
// (docs/SETTLEMENT.md, "Channels: claims and settles"): the claims round starts a tenant's
// ChannelClaimWorkflow (`claims-<tenant>`), which claims 100 channels in one claimWithSignature
// through the tenant's facilitator, never past a payer's voucher, then settles the receiver; a
// worker killed while the facilitator is claiming leaves the claim to the next worker, claimed
// once; a payer's timed withdrawal, noticed on chain, has its channel claimed before it can
// finalize, so the payer takes back only what was not charged; the period and the threshold say
// when a round is due; a voucher the payer did not sign leaves its row out of the batch, not the
// batch; a row the facilitator refuses although the gateway's check accepts it (a payer that made
// its account a smart account with EIP-7702) is isolated by claiming the batch in parts and set
// aside, the others claimed. Real parts: the stack's anvil (the channel contract), its
// facilitator (deposits by the unmodified @x402/evm client, claims and settles), PostgreSQL and
// Temporal.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { Wallet, ZeroAddress, parseEther, type JsonRpcProvider } from 'ethers';
import { WorkflowNotFoundError } from '@temporalio/client';
import { batchSettlementContract } from '../../contracts/batch-settlement.ts';
import { voucherDigest } from '../../x402/schemes/batch-settlement/typed-data.ts';
import { deploySmartWallet, fund } from '../../scripts/dev/chain.ts';
import { createLogger } from '../../lib/log.ts';
import { startDueClaims } from '../../temporal/claims-due.ts';
import { claimWorkflowId, startChannelClaims } from '../../temporal/claim-start.ts';
import { leaseDueClaimRounds } from '../../gateway/payment/channel-claims/due.ts';
import { stack } from '../support/stack.ts';
import { pastValidBefore } from '../support/facilitator.ts';
import { startHoldingFacilitator } from '../support/holding-facilitator.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { call } from '../support/http.ts';
import { balanceOf, chainProvider, newAccount, newPayTo, settlingTenant, type TestAccount } from '../support/x402.ts';
import {
  CHANNEL_DEPOSIT,
  CHANNEL_PRICE,
  channelRow,
  insertChannelRows,
  nextVoucher,
  openChannels,
} from '../support/channels.ts';

describe('channel claims: claims and settles of batch-settlement channels', function () {
  this.timeout(300_000);
  let provider: JsonRpcProvider;
  let account: TestAccount;
  const children: ChildProcess[] = [];

  before(async () => {
    provider = chainProvider();
    account = await newAccount(`claims-${randomUUID()}`);
  });
  after(async () => {
    for (const child of children) await stopWorkerProcess(child);
    await account.client.close();
    provider.destroy();
  });

  const contract = () => batchSettlementContract(provider);
  const onChain = async (channelId: string) => {
    const [balance, totalClaimed] = await contract().channels!(channelId);
    return { balance: balance as bigint, totalClaimed: totalClaimed as bigint };
  };
  const claimedTopic = () => contract().interface.getEvent('Claimed')!.topicHash;
  /** The transactions whose Claimed logs name `channelId`. */
  async function claimTransactions(channelId: string): Promise<string[]> {
    const logs = await provider.getLogs({
      address: await contract().getAddress(),
      topics: [claimedTopic(), channelId],
      fromBlock: 0,
    });
    return logs.map((log) => log.transactionHash);
  }

  /** The claims round as an API process runs it, its rounds run by the test. */
  const claimsRound = (opts: { taskQueue?: string } = {}) =>
    startDueClaims({
      orm: stack().orm,
      temporal: stack().temporal,
      taskQueue: opts.taskQueue ?? stack().config.temporal.taskQueue,
      rpc: stack().config.payment.contractSignatures,
      log: createLogger('api', 'silent'),
      everyMs: 0,
      urgentGapMs: 0,
      staleMs: 0,
    });

  const execute = (sql: string, params: unknown[]) => stack().orm.em.getConnection().execute(sql, params);

  it('claims 100 channels in one transaction, never past a voucher, and settles the receiver', async () => {
    const tenant = `claims-${randomUUID()}`;
    await settlingTenant(tenant, account);
    const receiver = newPayTo();
    const channels = await openChannels(account, receiver, 100);
    // Each channel charged a little less than its voucher allows; the first was charged past its
    // voucher (its payer signed for one price only): what the voucher allows is claimed, no more.
    const charged = channels.map((_, i) => (i === 0 ? 3n * CHANNEL_PRICE : CHANNEL_PRICE - BigInt(i)));
    const expected = charged.map((c) => (c > CHANNEL_PRICE ? CHANNEL_PRICE : c));
    await insertChannelRows(
      tenant,
      channels.map((channel, i) => ({ channel, charged: charged[i]! })),
    );

    const round = claimsRound();
    try {
      assert.ok((await round.runOnce()) >= 1);
    } finally {
      await round.stop();
    }
    const handle = stack().temporal.workflow.getHandle(claimWorkflowId(tenant));
    const result = await handle.result();
    assert.equal(result.claims.length, 1, JSON.stringify(result.claims));
    const [claim] = result.claims;
    assert.equal(claim.state, 'claimed');
    assert.match(claim.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(claim.claimed.length, 100);
    assert.deepEqual(claim.skipped, []);

    // On chain: one transaction claimed all 100, each up to its charge within its voucher.
    const receipt = (await provider.getTransactionReceipt(claim.transaction))!;
    const claimedLogs = receipt.logs.filter((log) => log.topics[0] === claimedTopic());
    assert.equal(claimedLogs.length, 100, 'all 100 channels claimed by the one transaction');
    assert.deepEqual(new Set(claimedLogs.map((log) => log.topics[1])), new Set(channels.map((c) => c.channelId)));
    for (const [i, channel] of channels.entries()) {
      assert.deepEqual(await onChain(channel.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: expected[i] });
      const row = await channelRow(channel.channelId);
      assert.equal(row.total_claimed, String(expected[i]));
      assert.ok(row.claimed_at, 'claimed_at recorded');
      assert.equal(row.claim_error, null);
    }
    // The settle swept what the claim credited to the receiver.
    const total = expected.reduce((a, b) => a + b, 0n);
    assert.deepEqual(result.settles, [
      {
        receiver: receiver.toLowerCase(),
        token: stack().infra.tokenAddress,
        amount: String(total),
        transaction: result.settles[0].transaction,
        state: 'settled',
      },
    ]);
    assert.equal(await balanceOf(provider, receiver), total);

    // The Web UI shows the round: its summary, and the claim activity's summary and input name
    // the channels and amounts (never a signature).
    const description = await handle.describe();
    assert.equal(await description.staticSummary(), `channel claims of ${tenant} (period)`);
    const history = await handle.fetchHistory();
    const scheduled = history.events!.filter(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'claimChannels',
    );
    assert.equal(scheduled.length, 1);
    const summary = Buffer.from(scheduled[0]!.userMetadata!.summary!.data!).toString('utf8');
    assert.match(summary, /claim 100 channels, \d+ unclaimed/);
    const input = Buffer.from(scheduled[0]!.activityTaskScheduledEventAttributes!.input!.payloads![0]!.data!).toString(
      'utf8',
    );
    assert.ok(input.includes(channels[5]!.channelId) && input.includes(`"totalClaimed":"${expected[5]}"`));
    assert.ok(!input.includes(channels[5]!.deposit.voucher.signature.slice(2, 40)), 'no signature in the history');

    // A second round finds nothing left to claim: nothing is due, nothing is sent.
    const again = claimsRound();
    try {
      await again.runOnce();
    } finally {
      await again.stop();
    }
    assert.equal((await claimTransactions(channels[1]!.channelId)).length, 1);
  });

  it('a voucher the payer did not sign is left out with its cause and its channel set aside; the rest of the batch is claimed', async () => {
    const tenant = `claims-forged-${randomUUID()}`;
    const token = await settlingTenant(tenant, account);
    const receiver = newPayTo();
    const channels = await openChannels(account, receiver, 3);
    // The third row's voucher claims to allow 5000, signed by a key that is not the payer's.
    const forger = Wallet.createRandom();
    const deposit = channels[2]!.deposit;
    const forged = {
      ...deposit,
      voucher: {
        ...deposit.voucher,
        maxClaimableAmount: '5000',
        signature: forger.signingKey.sign(voucherDigest(8453, channels[2]!.channelId, 5_000n)).serialized,
      },
    };
    await insertChannelRows(tenant, [
      { channel: channels[0]!, charged: 900n },
      { channel: channels[1]!, charged: 800n },
      { channel: channels[2]!, charged: 5_000n, voucher: forged },
    ]);
    const handle = await startChannelClaims(
      stack().temporal,
      stack().config.temporal.taskQueue,
      { tenantId: tenant, reason: 'period' },
      10_000,
    );
    const result = await handle.result();
    assert.equal(result.claims[0].state, 'claimed');
    assert.deepEqual(result.claims[0].skipped, [
      { channel: channels[2]!.channelId, cause: 'invalid_batch_settlement_evm_voucher_signature' },
    ]);
    assert.deepEqual(await onChain(channels[0]!.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: 900n });
    assert.deepEqual(await onChain(channels[1]!.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: 800n });
    assert.deepEqual(await onChain(channels[2]!.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: 0n });
    const row = await channelRow(channels[2]!.channelId);
    assert.deepEqual([row.total_claimed, row.claim_error], ['0', 'invalid_batch_settlement_evm_voucher_signature']);
    assert.equal(await balanceOf(provider, receiver), 1_700n);

    // The forged channel is set aside, as GET /v1/channels shows it: no later round is due for it,
    // not on the period, not for the payer's withdrawal, however long it waits.
    const shown = await call('GET', `/v1/channels/${channels[2]!.channelId}`, { token });
    assert.equal(shown.json.claim_error, 'invalid_batch_settlement_evm_voucher_signature');
    assert.match(String(shown.json.claim_quarantined_at), /^\d{4}-/);
    assert.equal(
      (await call('GET', `/v1/channels/${channels[0]!.channelId}`, { token })).json.claim_quarantined_at,
      null,
    );
    await execute(`update settlement_configs set claim_round_at = now() - interval '1 day' where tenant_id = ?`, [
      tenant,
    ]);
    await execute(`update channels set withdraw_requested_at = 1 where id = ?`, [channels[2]!.channelId]);
    const due = await leaseDueClaimRounds(stack().orm, { urgentGapMs: 0, batch: 1000 });
    assert.deepEqual(
      due.filter((r) => r.tenantId === tenant),
      [],
      'no round is due for a set-aside channel',
    );
  });

  it('a row the facilitator refuses though the gateway’s check accepts it: the batch is claimed in parts, the row set aside alone, the next round sends nothing', async () => {
    const tenant = `claims-split-${randomUUID()}`;
    // The tenant's facilitator reached through a relay that passes every answer on and notes it.
    const answers: boolean[] = [];
    const relay = await startHoldingFacilitator({
      facilitatorUrl: stack().facilitator.url,
      pki: stack().infra.pki.files,
      account: account.cert,
      rewrite: (json) => {
        answers.push(json.success === true);
        return json;
      },
    });
    try {
      const token = await settlingTenant(tenant, account, relay.url);
      const receiver = newPayTo();
      // The third (in the plan's order: the most unclaimed first) names no payer authorizer: the
      // contract checks its vouchers as SignatureChecker does, the payer's key or, once the
      // payer's address has code, its ERC-1271 answer.
      const [first, second, third, fourth] = await openChannels(account, receiver, 4);
      const bad = (await openChannels(account, receiver, 1, { payerAuthorizer: ZeroAddress as `0x${string}` }))[0]!;
      const channels = [first!, second!, bad, third!, fourth!];
      const charged = [900n, 800n, 700n, 600n, 500n];
      await insertChannelRows(
        tenant,
        channels.map((channel, i) => ({ channel, charged: charged[i]! })),
      );
      // Its payer then makes its account a smart account (EIP-7702) whose code is a wallet of
      // another key, which refuses the vouchers the payer's key signed. The gateway's check and the
      // facilitator's recover the key and still accept them: only the facilitator's simulation of
      // the claim fails, for every batch holding the row.
      const delegate = await deploySmartWallet(
        stack().infra.chainRpcUrl,
        Wallet.createRandom().address,
        resolve('.test-data', 'contracts'),
      );
      const payer = bad.wallet.connect(provider);
      await fund(stack().infra.chainRpcUrl, stack().infra.tokenAddress, payer.address, { eth: parseEther('1') });
      // Sent by the payer itself: the authorization's nonce is the one after this transaction's.
      const authorization = await payer.authorize({ address: delegate, nonce: (await payer.getNonce()) + 1 });
      // (Not to itself: its new code takes no plain call.)
      await (await payer.sendTransaction({ type: 4, to: ZeroAddress, authorizationList: [authorization] })).wait();
      assert.equal((await provider.getCode(payer.address)).toLowerCase(), `0xef0100${delegate.slice(2).toLowerCase()}`);

      const handle = await startChannelClaims(
        stack().temporal,
        stack().config.temporal.taskQueue,
        { tenantId: tenant, reason: 'period' },
        10_000,
      );
      const result = await handle.result();
      assert.equal(result.claims.length, 1, JSON.stringify(result.claims));
      const [claim] = result.claims;
      // The batch (refused), its first three rows (refused), the first two (claimed), the third
      // alone (refused: set aside), the last two (claimed); then the receiver's settle.
      assert.deepEqual(answers, [false, false, true, false, true, true]);
      assert.equal(claim.state, 'claimed');
      assert.equal(claim.requests, 5);
      assert.equal(claim.transactions.length, 2, JSON.stringify(claim));
      assert.equal(claim.transaction, claim.transactions[0]);
      assert.deepEqual(claim.quarantined, [bad.channelId]);
      assert.deepEqual(claim.skipped, [{ channel: bad.channelId, cause: 'claim_refused' }]);
      assert.deepEqual(
        claim.claimed.map((c: { channel: string }) => c.channel).sort(),
        channels
          .filter((c) => c !== bad)
          .map((c) => c.channelId)
          .sort(),
      );

      // On chain: the four claimed, each by one of the claim's two transactions; the refused one not at all.
      const transactions = new Set<string>();
      for (const [i, channel] of channels.entries()) {
        const expected = channel === bad ? 0n : charged[i]!;
        assert.deepEqual(await onChain(channel.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: expected });
        assert.equal((await channelRow(channel.channelId)).total_claimed, String(expected));
        for (const tx of await claimTransactions(channel.channelId)) transactions.add(tx);
      }
      assert.deepEqual([...transactions].sort(), [...claim.transactions].sort());
      assert.equal(await balanceOf(provider, receiver), 900n + 800n + 600n + 500n);
      // The Web UI's line for the round (its current details) counts them.
      const metadata = await handle.query<{ currentDetails: string }>('__temporal_workflow_metadata');
      assert.equal(metadata.currentDetails, 'claimed 4 channels in 2 transactions, 1 set aside, settled 1 receivers');
      const shown = await call('GET', `/v1/channels/${bad.channelId}`, { token });
      assert.equal(shown.json.claim_error, 'claim_refused');
      assert.match(String(shown.json.claim_quarantined_at), /^\d{4}-/);

      // The next round: no round is due for the set-aside channel, and one started all the same
      // plans nothing and sends the facilitator nothing.
      await execute(`update settlement_configs set claim_round_at = now() - interval '1 day' where tenant_id = ?`, [
        tenant,
      ]);
      const due = await leaseDueClaimRounds(stack().orm, { urgentGapMs: 0, batch: 1000 });
      assert.deepEqual(
        due.filter((r) => r.tenantId === tenant),
        [],
      );
      const again = await startChannelClaims(
        stack().temporal,
        stack().config.temporal.taskQueue,
        { tenantId: tenant, reason: 'period' },
        10_000,
      );
      assert.deepEqual((await again.result()).claims, []);
      assert.equal(answers.length, 6, 'no claim request in the next round');
      for (const channel of channels.filter((c) => c !== bad))
        assert.equal((await claimTransactions(channel.channelId)).length, 1);
    } finally {
      await relay.close();
    }
  });

  it('a worker killed while the facilitator claims: the next worker finishes the round, claimed once', async () => {
    const tenant = `claims-crash-${randomUUID()}`;
    const relay = await startHoldingFacilitator({
      facilitatorUrl: stack().facilitator.url,
      pki: stack().infra.pki.files,
      account: account.cert,
    });
    try {
      const token = await settlingTenant(tenant, account, relay.url);
      const receiver = newPayTo();
      const channels = await openChannels(account, receiver, 3);
      // Two calls on the first channel (its second voucher), one on the others.
      const second = await nextVoucher(channels[0]!, CHANNEL_PRICE);
      await insertChannelRows(tenant, [
        { channel: channels[0]!, charged: 1_500n, voucher: second },
        { channel: channels[1]!, charged: 700n },
        { channel: channels[2]!, charged: CHANNEL_PRICE },
      ]);
      const taskQueue = `claims-crash-${randomUUID()}`;
      const first = await startWorkerProcess(taskQueue);
      children.push(first);
      const handle = await startChannelClaims(
        stack().temporal,
        taskQueue,
        { tenantId: tenant, reason: 'period' },
        10_000,
      );
      // The facilitator has claimed (on chain) and answered; the worker still waits for the answer.
      const held = await relay.held;
      assert.equal(held.json.success, true, JSON.stringify(held.json));
      first.kill('SIGKILL');
      await exited(first);
      // The tenant's facilitator, reached directly again; a worker takes the queue.
      const config = await call('GET', '/v1/settlement/config', { token });
      const put = await call('PUT', '/v1/settlement/config', {
        token,
        json: {
          facilitator_url: stack().facilitator.url,
          facilitator_credential_ref: config.json.facilitator_credential_ref,
        },
      });
      assert.equal(put.status, 200);
      children.push(await startWorkerProcess(taskQueue));

      const result = await handle.result();
      assert.equal(result.claims[0].state, 'claimed');
      assert.equal(result.claims[0].transaction, null, 'the retried attempt found the claim on chain');
      const expected = [1_500n, 700n, CHANNEL_PRICE];
      const transactions = new Set<string>();
      for (const [i, channel] of channels.entries()) {
        assert.deepEqual(await onChain(channel.channelId), { balance: CHANNEL_DEPOSIT, totalClaimed: expected[i] });
        assert.equal((await channelRow(channel.channelId)).total_claimed, String(expected[i]));
        for (const tx of await claimTransactions(channel.channelId)) transactions.add(tx);
      }
      assert.equal(transactions.size, 1, 'claimed by one transaction');
      assert.equal(await balanceOf(provider, receiver), 1_500n + 700n + CHANNEL_PRICE);
    } finally {
      await relay.close();
    }
  });

  it('a payer’s timed withdrawal is noticed on chain and its channel claimed before it can finalize', async () => {
    const tenant = `claims-withdraw-${randomUUID()}`;
    await settlingTenant(tenant, account);
    const receiver = newPayTo();
    const [channel] = await openChannels(account, receiver, 1);
    const second = await nextVoucher(channel!, CHANNEL_PRICE);
    await insertChannelRows(tenant, [{ channel: channel!, charged: 1_800n, voucher: second }]);
    // A round ran just now, and the period is an hour: nothing is due.
    await execute(
      `update settlement_configs set claim_every_seconds = 3600, claim_round_at = now() where tenant_id = ?`,
      [tenant],
    );
    const round = claimsRound();
    try {
      await round.runOnce();
      await assert.rejects(
        stack().temporal.workflow.getHandle(claimWorkflowId(tenant)).describe(),
        WorkflowNotFoundError,
      );

      // The payer asks for all of its escrow back, final after the channel's 900 s.
      const payer = channel!.wallet.connect(provider);
      await fund(stack().infra.chainRpcUrl, stack().infra.tokenAddress, payer.address, { eth: parseEther('1') });
      const initiated = await (
        await batchSettlementContract(payer).initiateWithdraw!(channel!.deposit.channelConfig, CHANNEL_DEPOSIT)
      ).wait();
      const initiatedAt = (await provider.getBlock(initiated.blockNumber))!.timestamp;

      // The next round reads the chain, sees the withdrawal, and claims at once.
      assert.ok((await round.runOnce()) >= 1);
      const handle = stack().temporal.workflow.getHandle(claimWorkflowId(tenant));
      assert.equal(await (await handle.describe()).staticSummary(), `channel claims of ${tenant} (withdrawal)`);
      const result = await handle.result();
      assert.equal(result.claims[0].state, 'claimed');
      const claimBlock = (await provider.getTransactionReceipt(result.claims[0].transaction))!.blockNumber;
      assert.ok((await provider.getBlock(claimBlock))!.timestamp < initiatedAt + 900, 'claimed before it can finalize');
      assert.equal((await channelRow(channel!.channelId)).withdraw_requested_at, initiatedAt);

      // Once the delay has passed, the payer takes back only what was not charged.
      const before = await balanceOf(provider, payer.address);
      await pastValidBefore(provider, initiatedAt + 901, async () => {
        await (await batchSettlementContract(payer).finalizeWithdraw!(channel!.deposit.channelConfig)).wait();
      });
      assert.equal(await balanceOf(provider, payer.address), before + CHANNEL_DEPOSIT - 1_800n);
      assert.deepEqual(await onChain(channel!.channelId), { balance: 1_800n, totalClaimed: 1_800n });
      assert.equal(await balanceOf(provider, receiver), 1_800n);
    } finally {
      await round.stop();
    }
  });

  it('a round is due on the period, sooner past the threshold, and not twice within the period', async () => {
    const tenant = `claims-due-${randomUUID()}`;
    await settlingTenant(tenant, account);
    const [channel] = await openChannels(account, newPayTo(), 1);
    const second = await nextVoucher(channel!, CHANNEL_PRICE);
    await insertChannelRows(tenant, [{ channel: channel!, charged: 600n, voucher: second }]);
    const dueNow = async (urgentGapMs = 0) =>
      (await leaseDueClaimRounds(stack().orm, { urgentGapMs, batch: 1000 })).filter((r) => r.tenantId === tenant);

    // Never claimed: due at once; then not again within the period.
    assert.deepEqual(await dueNow(), [{ tenantId: tenant, reason: 'period' }]);
    assert.deepEqual(await dueNow(), []);
    // A threshold of 1000: 600 unclaimed is below it; 1200 passes it, sooner than the period.
    await execute(`update settlement_configs set claim_threshold = 1000 where tenant_id = ?`, [tenant]);
    assert.deepEqual(await dueNow(), []);
    await execute(`update channels set charged_cumulative = 1200 where id = ?`, [channel!.channelId]);
    assert.deepEqual(await dueNow(), [{ tenantId: tenant, reason: 'threshold' }]);
    // Urgent rounds keep their gap; the period passed makes the next one due.
    assert.deepEqual(await dueNow(60_000), []);
    await execute(
      `update settlement_configs set claim_threshold = null, claim_round_at = now() - interval '301 seconds' where tenant_id = ?`,
      [tenant],
    );
    assert.deepEqual(await dueNow(60_000), [{ tenantId: tenant, reason: 'period' }]);
  });
  it('GET /v1/channels lists the tenant’s channels with their state, paged; another tenant’s are absent', async () => {
    const tenant = `claims-api-${randomUUID()}`;
    const token = await settlingTenant(tenant, account);
    const receiver = newPayTo();
    const channels = await openChannels(account, receiver, 3);
    const second = await nextVoucher(channels[0]!, CHANNEL_PRICE);
    await insertChannelRows(tenant, [
      { channel: channels[0]!, charged: 1_200n, voucher: second },
      { channel: channels[1]!, charged: 400n },
      { channel: channels[2]!, charged: 0n },
    ]);
    const handle = await startChannelClaims(
      stack().temporal,
      stack().config.temporal.taskQueue,
      { tenantId: tenant, reason: 'period' },
      10_000,
    );
    await handle.result();

    const ids = channels.map((c) => c.channelId).sort();
    const first = await call('GET', '/v1/channels?limit=2', { token });
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(
      first.json.data.map((c: { id: string }) => c.id),
      ids.slice(0, 2),
    );
    assert.equal(first.json.next_cursor, ids[1]);
    const rest = await call('GET', `/v1/channels?limit=2&cursor=${first.json.next_cursor}`, { token });
    assert.deepEqual(
      rest.json.data.map((c: { id: string }) => c.id),
      ids.slice(2),
    );
    assert.equal(rest.json.next_cursor, null);

    const one = await call('GET', `/v1/channels/${channels[0]!.channelId.toUpperCase().replace('0X', '0x')}`, {
      token,
    });
    assert.equal(one.status, 200, one.text);
    const config = channels[0]!.deposit.channelConfig;
    assert.deepEqual(
      { ...one.json, claimed_at: typeof one.json.claimed_at, last_request_at: 0, created_at: 0 },
      {
        id: channels[0]!.channelId,
        payer: config.payer.toLowerCase(),
        receiver: receiver.toLowerCase(),
        receiver_authorizer: config.receiverAuthorizer.toLowerCase(),
        token: config.token,
        withdraw_delay: 900,
        balance: String(CHANNEL_DEPOSIT),
        total_claimed: '1200',
        charged_cumulative: '1200',
        signed_max_claimable: '2000',
        withdraw_requested_at: null,
        refund_nonce: '0',
        last_request_at: 0,
        claimed_at: 'string',
        claim_error: null,
        claim_quarantined_at: null,
        created_at: 0,
      },
    );
    assert.ok(!one.text.includes(second.voucher.signature.slice(2)), 'no voucher signature in the answer');
    // A channel with nothing charged is listed, and was never claimed.
    assert.equal((await call('GET', `/v1/channels/${channels[2]!.channelId}`, { token })).json.claimed_at, null);

    // Another tenant sees none of them; a malformed id or cursor is refused.
    const other = await stack().token(`claims-api-other-${randomUUID()}`);
    const none = await call('GET', '/v1/channels', { token: other });
    assert.deepEqual(none.json, { data: [], next_cursor: null });
    assert.equal((await call('GET', `/v1/channels/${channels[0]!.channelId}`, { token: other })).status, 404);
    assert.equal((await call('GET', '/v1/channels/0x1234', { token })).status, 404);
    const badCursor = await call('GET', '/v1/channels?cursor=abc', { token });
    assert.equal(badCursor.status, 400);
    assert.deepEqual(badCursor.json, { error: 'invalid cursor' });
  });
});
