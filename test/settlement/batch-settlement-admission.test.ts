// What a channel payment that cannot pay costs the gateway (x402 `batch-settlement`,
// docs/SETTLEMENT.md "The gateway's channels"): a voucher of a channel nobody funded, from an
// anonymous caller, leaves no row and costs one chain read however often it is sent; a deposit
// the facilitator does not take leaves no row either; a facilitator answering a channel state out
// of a uint256's range is not believed (the chain is read instead), never a 5xx; the mirror of
// the chain never moves back (a read answering late loses to a newer one; claimed totals only rise).
// Real parts: the stack's anvil (behind a counting relay, to see the gateway's chain reads), its
// facilitator over mutual TLS, PostgreSQL and Temporal; an API process of the test's own reads the
// chain through the relay. The payments are signed by the unmodified @x402/evm client.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Wallet } from 'ethers';
import { x402Client } from '@x402/core/client';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { stack } from '../support/stack.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { newPayTo, newWallet, settlingTenant } from '../support/x402.ts';
import { startHoldingFacilitator } from '../support/holding-facilitator.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startApiProcess } from '../support/api-process.ts';
import { createChannelStore } from '../../gateway/payment/channels/store.ts';
import { exited } from '../support/worker-process.ts';

const CEILING = 1_000n;
const CHAIN_ID = 8453;

describe('batch-settlement: what an unpayable channel payment costs the gateway', function () {
  this.timeout(180_000);
  let paying: PayingTenant;
  let upstream: TestUpstream;
  let upstreamCalls = 0;
  withPayingTenant('batch-admission', (p) => (paying = p));

  /** The chain as the test's API process reaches it, counting the requests that name `probe`. */
  let relay: Server;
  let probe = '';
  let probed = 0;
  let api: Awaited<ReturnType<typeof startApiProcess>>;

  before(async () => {
    upstream = await startUpstream((_req, res) => {
      upstreamCalls++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
    relay = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString();
        if (probe && body.toLowerCase().includes(probe)) probed++;
        fetch(stack().infra.chainRpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
          .then(async (answer) =>
            res.writeHead(answer.status, { 'content-type': 'application/json' }).end(await answer.text()),
          )
          .catch(() => res.writeHead(502).end());
      });
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    api = await startApiProcess({ CHAIN_RPC_URL: `http://127.0.0.1:${(relay.address() as AddressInfo).port}` });
  });
  after(async () => {
    api.child.kill('SIGKILL');
    await exited(api.child);
    relay.close();
    await upstream.close();
  });

  async function channelAgent(token = paying.token): Promise<string> {
    return createAgent(token, {
      upstream_url: upstream.url,
      pricing: {
        scheme: 'batch-settlement',
        amount: String(CEILING),
        asset: 'USDC',
        network: 'base',
        pay_to: newPayTo(),
        min_deposit: String(20n * CEILING),
        withdraw_delay: 900,
      },
    });
  }

  /** A payer holding nothing: the unmodified client, its channel record what the test says. */
  function emptyPayer(privateKey = Wallet.createRandom().privateKey) {
    const storage = new InMemoryClientChannelStorage();
    const account = privateKeyToAccount(privateKey as `0x${string}`);
    const client = new x402Client().register(
      'eip155:*',
      new BatchSettlementEvmScheme(toClientEvmSigner(account), { storage }),
    );
    client.setSpendControls({ allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }] });
    return { client, storage };
  }

  const send = (url: string, payment: unknown) =>
    fetch(url, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${paying.token}`,
        'content-type': 'application/json',
        'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(payment as never),
      },
      body: '{}',
    });

  const rowsOf = async (channelId: string) =>
    (
      await stack()
        .orm.em.getConnection()
        .execute<Array<{ n: number }>>(`select count(*)::int as n from channels where id = ?`, [channelId])
    )[0]!.n;

  async function challengeOf(url: string) {
    const unpaid = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(unpaid.status, 402);
    return decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!);
  }

  it('a voucher of a channel nobody funded leaves no row and costs one chain read, however often it is sent', async () => {
    const url = `${api.url}/v1/proxy/${await channelAgent()}/stream`;
    const required = await challengeOf(url);
    const { client, storage } = emptyPayer();
    const deposit = await client.createPaymentPayload(required);
    const channelId = (deposit.payload as { voucher: { channelId: string } }).voucher.channelId.toLowerCase();
    // The client believes its channel funded (no deposit was ever made): it signs a voucher.
    await storage.set(channelId, { balance: String(1_000n * CEILING), chargedCumulativeAmount: '0' });
    const voucher = await client.createPaymentPayload(required);
    assert.equal((voucher.payload as { type: string }).type, 'voucher');

    probe = channelId.slice(2);
    probed = 0;
    const before = upstreamCalls;
    for (let i = 0; i < 6; i++) {
      const res = await send(url, voucher);
      assert.equal(res.status, 402, await res.text());
    }
    assert.ok(probed > 0, 'the chain was asked once');
    // One read of the channel is its three eth_calls (channels, pendingWithdrawals, refundNonce).
    assert.ok(probed <= 3, `${probed} chain requests for six vouchers`);
    assert.equal(await rowsOf(channelId), 0, 'no row kept');
    assert.equal(upstreamCalls, before);
  });

  it('a deposit the facilitator does not take (a payer holding no tokens) leaves no row', async () => {
    const url = `${api.url}/v1/proxy/${await channelAgent()}/stream`;
    const required = await challengeOf(url);
    const { client } = emptyPayer();
    const deposit = await client.createPaymentPayload(required);
    assert.equal((deposit.payload as { type: string }).type, 'deposit');
    const channelId = (deposit.payload as { voucher: { channelId: string } }).voucher.channelId.toLowerCase();
    const res = await send(url, deposit);
    assert.equal(res.status, 402, await res.text());
    assert.equal(await rowsOf(channelId), 0, 'no row kept');
  });
  it('a facilitator answering a channel state out of range is not believed: the chain is read, the call served', async () => {
    // The tenant's facilitator, as it answers through a relay that makes every channel state's
    // balance 10^80 (more than a uint256, more than the gateway's numeric(78,0)) and its amount no number.
    const relay = await startHoldingFacilitator({
      facilitatorUrl: stack().facilitator.url,
      pki: stack().infra.pki.files,
      account: paying.account.cert,
      rewrite: (json) => {
        const extra = json.extra as { channelState?: Record<string, unknown> } | undefined;
        if (extra?.channelState) extra.channelState.balance = `1${'0'.repeat(80)}`;
        return { ...json, amount: 'lots' };
      },
    });
    try {
      const token = await settlingTenant(`batch-bad-state-${Date.now()}`, paying.account, relay.url);
      const agentId = await channelAgent(token);
      const payer = await newWallet({ usdc: 1_000_000n });
      const pay = wrapFetchWithPayment(fetch, emptyPayer(payer.privateKey).client);
      const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: '{}',
      });
      assert.equal(res.status, 200, await res.text());
      const [row] = await stack()
        .orm.em.getConnection()
        .execute<Array<{ balance: string }>>(`select balance::text from channels where payer = ?`, [
          payer.address.toLowerCase(),
        ]);
      assert.equal(row?.balance, String(20n * CEILING), 'the escrow as the chain says it');
    } finally {
      await relay.close();
    }
  });
  it('the mirror of the chain never moves back: a read answering late loses to a newer one, claimed totals only rise', async () => {
    const id = `0x${randomBytes(32).toString('hex')}`;
    const sql = stack().orm.em.getConnection();
    await sql.execute(
      `insert into channels (id, tenant_id, payer, receiver, receiver_authorizer, config) values (?, ?, ?, ?, ?, '{}'::jsonb)`,
      [id, paying.tenant, newPayTo().toLowerCase(), newPayTo().toLowerCase(), newPayTo().toLowerCase()],
    );
    const store = createChannelStore(stack().orm);
    const now = Date.now();
    const state = (balance: bigint, totalClaimed: bigint, withdrawRequestedAt: number, refundNonce: bigint) => ({
      balance,
      totalClaimed,
      withdrawRequestedAt,
      refundNonce,
    });
    const view = (r: Awaited<ReturnType<typeof store.mirror>>) => ({
      balance: r.balance,
      totalClaimed: r.totalClaimed,
      withdrawRequestedAt: r.withdrawRequestedAt,
      refundNonce: r.refundNonce,
      charged: r.charged,
    });
    // A read begun now: taken.
    let row = await store.mirror(id, state(5_000n, 2_000n, 0, 1n), new Date(now));
    assert.deepEqual(view(row), {
      balance: 5_000n,
      totalClaimed: 2_000n,
      withdrawRequestedAt: 0,
      refundNonce: 1n,
      charged: 2_000n,
    });
    // A read begun a minute earlier that answers only now: nothing moves back.
    row = await store.mirror(id, state(9_000n, 1_000n, 1_700_000_000, 0n), new Date(now - 60_000));
    assert.deepEqual(view(row), {
      balance: 5_000n,
      totalClaimed: 2_000n,
      withdrawRequestedAt: 0,
      refundNonce: 1n,
      charged: 2_000n,
    });
    // A newer read (a node behind on the claims): the escrow and withdrawal are its, the claimed total stays.
    row = await store.mirror(id, state(3_000n, 1_500n, 1_700_000_000, 1n), new Date(now + 1_000));
    assert.deepEqual(view(row), {
      balance: 3_000n,
      totalClaimed: 2_000n,
      withdrawRequestedAt: 1_700_000_000,
      refundNonce: 1n,
      charged: 2_000n,
    });
    await sql.execute(`delete from channels where id = ?`, [id]);
  });
});
