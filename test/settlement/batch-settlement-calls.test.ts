// Calls paid from a payment channel (x402 `batch-settlement`, docs/SETTLEMENT.md): the unmodified
// @x402/fetch client with @x402/evm's BatchSettlementEvmScheme deposits once through the tenant's
// facilitator, then pays every later call with a voucher the gateway checks itself; each served
// call's charge joins the channel's charged total once its answer is complete, and the payer's
// balance on chain moves once, for the deposit. A client that lost its state recovers through the
// corrective 402; a call the upstream fails is charged nothing; a cooperative refund returns the
// rest of the escrow and calls no upstream.
// Real parts: the stack's anvil (the channel contract at its canonical address), its facilitator
// over mutual TLS, PostgreSQL and Temporal.
import assert from 'node:assert/strict';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import type { JsonRpcProvider, Wallet } from 'ethers';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier';
import { privateKeyToAccount } from 'viem/accounts';
import { batchSettlementContract } from '../../contracts/batch-settlement.ts';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { claimWorkflowId, startChannelClaims } from '../../temporal/claim-start.ts';
import { startDueClaims } from '../../temporal/claims-due.ts';
import { createLogger } from '../../lib/log.ts';
import {
  HOLD_LEASE_SECONDS,
  HOLD_RENEW_EVERY_MS,
  LEASE_RENEW_EVERY_MS,
  keepAcceptedLease,
  TRANSACTIONAL_LEASE_SECONDS,
} from '../../gateway/payment/channels/store.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { balanceOf, facilitatorCredential, newAccount, newPayTo, newWallet, settlingTenant } from '../support/x402.ts';
import { rpcReader, settleLostCharge } from '../support/upto.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { invocationRow } from '../support/proxy-helpers.ts';
import { startApiProcess } from '../support/api-process.ts';
import { forgedVoucher } from '../support/batch-settlement.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { startStallingFacilitator } from '../support/stalling-facilitator.ts';
import { answerKnownChannelIdentifier } from '../../gateway/payment/identifier.ts';
import { PaymentStillSettling } from '../../gateway/payment/refusals.ts';
import { waitFor } from '../support/wait.ts';
import { closeUnforwarded, failStaleStreams } from '../../gateway/invocations/stale-streams.ts';

const CEILING = 1_000n;
const MIN_DEPOSIT = 20_000n;
const CHAIN_ID = 8453;
const ZERO_ADDRESS = '0x0000000000000000000000000000000000000000' as const;

describe('batch-settlement: calls paid from a channel', function () {
  this.timeout(180_000);
  let paying: PayingTenant;
  let upstream: TestUpstream;
  let upstreamCalls = 0;
  /** Held streams the test ends, by their `x-hold` value. */
  const held = new Map<string, Promise<void>>();
  withPayingTenant('batch-calls', (p) => (paying = p));

  before(async () => {
    upstream = await startUpstream((req, res) => {
      upstreamCalls++;
      if (req.headers['x-hold']) {
        // A first event, then the stream is held open: until the test lets it end (`held`), or
        // the test's process kill breaks it.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"first":true}\n\n');
        // `x-beat`: an event a second meanwhile, so the gateway's idle timeout never ends the stream.
        const beat = req.headers['x-beat'] ? setInterval(() => res.write('data: {"beat":true}\n\n'), 1_000) : null;
        held.get(String(req.headers['x-hold']))?.then(() => {
          if (beat) clearInterval(beat);
          res.end('data: {"last":true}\n\n');
        });
        return;
      }
      if (req.headers['x-fail']) {
        res.writeHead(503).end('down');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
  });
  after(() => upstream.close());

  async function channelAgent(
    payTo: string,
    token = paying.token,
    fields: Record<string, unknown> = {},
  ): Promise<string> {
    return createAgent(token, {
      ...fields,
      upstream_url: upstream.url,
      pricing: {
        scheme: 'batch-settlement',
        amount: String(CEILING),
        asset: 'USDC',
        network: 'base',
        pay_to: payTo,
        min_deposit: String(MIN_DEPOSIT),
        withdraw_delay: 900,
      },
    });
  }

  /** The unmodified client paying as `payer`, with its own channel record (a new one: a client that lost its state). */
  function channelClient(payer: Wallet, opts: { payerAuthorizer?: `0x${string}` } = {}) {
    const signer = toClientEvmSigner(
      privateKeyToAccount(payer.privateKey as `0x${string}`),
      rpcReader(stack().infra.chainRpcUrl) as Parameters<typeof toClientEvmSigner>[1],
    );
    const scheme = new BatchSettlementEvmScheme(signer, { storage: new InMemoryClientChannelStorage(), ...opts });
    const client = new x402Client().register('eip155:*', scheme);
    client.setSpendControls({ allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }] });
    return { scheme, client, fetch: wrapFetchWithPayment(fetch, client) };
  }

  async function paidStream(
    pay: typeof fetch,
    agentId: string,
    headers: Record<string, string> = {},
    token = paying.token,
    base = stack().apiUrl,
  ) {
    const res = await pay(`${base}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      body: '{}',
    });
    const text = await res.text();
    return { status: res.status, text, id: res.headers.get('x-gateway-invocation-id') };
  }

  /**
   * A paid stream the upstream holds open after its first event, until `end` (the test's
   * `x-hold`); `beat`: an event every second meanwhile (past the stack's 5 s idle timeout).
   */
  async function heldStream(pay: typeof fetch, agentId: string, base = stack().apiUrl, beat = false) {
    const key = randomUUID();
    let end!: () => void;
    held.set(key, new Promise<void>((resolve) => (end = resolve)));
    const res = await pay(`${base}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${paying.token}`,
        'content-type': 'application/json',
        'x-hold': key,
        ...(beat ? { 'x-beat': '1' } : {}),
      },
      body: '{}',
    });
    return { res, end };
  }

  /** A channel agent, a funded payer's client, and the channel its first paid call opened. */
  async function openedChannel() {
    const agentId = await channelAgent(newPayTo());
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { fetch: pay, scheme, client } = channelClient(payer);
    const opened = await paidStream(pay, agentId);
    assert.equal(opened.status, 200, opened.text);
    const channelId = (await invocationRow(opened.id!))!.paymentChannel!;
    return { agentId, pay, channelId, payer, scheme, client };
  }

  /**
   * A `fetch` for the client's refund (which it sends as a GET; the invoke endpoints take POST),
   * keeping each payment header it sends.
   */
  function refundSender() {
    const sent: string[] = [];
    const asPost: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', `Bearer ${paying.token}`);
      const signature = headers.get('payment-signature');
      if (signature) sent.push(signature);
      return fetch(input, { ...init, method: 'POST', body: '{}', headers });
    };
    return { asPost, sent };
  }

  /** A refund's payment header sent again, as a replay would. */
  const sentAgain = (url: string, header: string) =>
    fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${paying.token}`, 'PAYMENT-SIGNATURE': header },
      body: '{}',
    });

  /** The client's payment for the agent's challenge (its unpaid call's 402), not sent. */
  async function paymentFor(client: x402Client, agentId: string) {
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const auth = { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' };
    const challenge = await fetch(url, { method: 'POST', headers: auth, body: '{}' });
    assert.equal(challenge.status, 402);
    const payload = await client.createPaymentPayload(
      decodePaymentRequiredHeader(challenge.headers.get('payment-required')!),
    );
    return { url, auth, payload };
  }

  /** The channel's row, as the gateway keeps it. */
  const channelRow = async (channelId: string) => {
    const [row] = await stack()
      .orm.em.getConnection()
      .execute<Array<Record<string, string | null>>>(
        `select charged_cumulative::text, signed_max_claimable::text, busy_invocation, refund_in_doubt
           from channels where id = ?`,
        [channelId],
      );
    return row!;
  };

  const onChain = async (provider: JsonRpcProvider, channelId: string) => {
    const [balance, totalClaimed] = await batchSettlementContract(provider).channels!(channelId);
    return { balance: balance as bigint, totalClaimed: totalClaimed as bigint };
  };

  it('deposits once, then pays each call with a voucher; a lost client state recovers through the corrective 402', async () => {
    const payTo = newPayTo();
    const agentId = await channelAgent(payTo);
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const before = await balanceOf(paying.provider, payer.address);
    const { fetch: pay } = channelClient(payer);

    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const call = await paidStream(pay, agentId);
      assert.equal(call.status, 200, call.text);
      assert.equal(call.text, '{"ok":true}');
      ids.push(call.id!);
    }
    // One deposit moved the payer's tokens; the vouchers moved nothing.
    assert.equal(await balanceOf(paying.provider, payer.address), before - MIN_DEPOSIT);
    for (const id of ids) {
      const row = await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal(row.paymentScheme, 'batch-settlement');
      assert.equal(row.paymentCharge, String(CEILING));
    }
    const first = await invocationRow(ids[0]!);
    const channelId = first!.paymentChannel!;
    assert.match(channelId, /^0x[0-9a-f]{64}$/);
    assert.deepEqual(await onChain(paying.provider, channelId), { balance: MIN_DEPOSIT, totalClaimed: 0n });

    // A client with no record of the channel: it reads the chain (nothing claimed yet), signs a
    // voucher the gateway does not expect, is answered the corrective 402 with the payer's latest
    // voucher, verifies it and pays again with the right ceiling.
    const fresh = channelClient(payer);
    const recovered = await paidStream(fresh.fetch, agentId);
    assert.equal(recovered.status, 200, recovered.text);
    const row = await waitForRow(recovered.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    assert.equal(row.paymentChannel, channelId);
    assert.equal(await balanceOf(paying.provider, payer.address), before - MIN_DEPOSIT, 'no second deposit');
  });

  it('charges nothing for a call its upstream fails, and refunds the rest of the escrow without calling the upstream', async () => {
    const payTo = newPayTo();
    const agentId = await channelAgent(payTo);
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const before = await balanceOf(paying.provider, payer.address);
    const { fetch: pay, scheme } = channelClient(payer);

    const served = await paidStream(pay, agentId);
    assert.equal(served.status, 200, served.text);
    const failed = await paidStream(pay, agentId, { 'x-fail': '1' });
    assert.equal(failed.status, 503);
    const failedRow = await waitForRow(failed.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    assert.equal(failedRow.paymentCharge, '0', 'a failed upstream costs nothing');
    // The client counted the failed call's ceiling: its next voucher is corrected, then served.
    const next = await paidStream(pay, agentId);
    assert.equal(next.status, 200, next.text);
    await waitForRow(next.id!, (r) => r.paymentSettlement === 'settled', 15_000);

    // The refund goes to the same endpoint (the client sends it as a GET; the endpoint takes POST).
    const callsBefore = upstreamCalls;
    const asPost: typeof fetch = (input, init) =>
      fetch(input, {
        ...init,
        method: 'POST',
        body: '{}',
        headers: { ...Object.fromEntries(new Headers(init?.headers)), authorization: `Bearer ${paying.token}` },
      });
    const settled = await scheme.refund(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, { fetch: asPost });
    assert.equal(settled.success, true);
    assert.equal(upstreamCalls, callsBefore, 'the upstream is not called for a refund');
    // Two calls charged: everything else is back with the payer (claimed or not, the escrow keeps the charges).
    const channelId = (await invocationRow(served.id!))!.paymentChannel!;
    const state = await onChain(paying.provider, channelId);
    assert.equal(state.balance, 2n * CEILING);
    assert.equal(await balanceOf(paying.provider, payer.address), before - 2n * CEILING);
  });
  it('pays transactional calls from the channel too: each charge is committed by its workflow, the next call waits for it', async () => {
    const agentId = await channelAgent(newPayTo());
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { fetch: pay } = channelClient(payer);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' },
        body: '{}',
      });
      const text = await res.text();
      assert.equal(res.status, 202, text);
      ids.push((JSON.parse(text) as { invocation_id: string }).invocation_id);
    }
    for (const id of ids) {
      const row = await waitForRow(id, (r) => r.paymentSettlement === 'settled', 30_000);
      assert.equal(row.status, 'succeeded');
      assert.equal(row.paymentCharge, String(CEILING));
    }
    const channel = await channelRow((await invocationRow(ids[0]!))!.paymentChannel!);
    assert.equal(channel.charged_cumulative, String(3n * CEILING));
    assert.equal(channel.busy_invocation, null, 'the channel is let go');
  });

  it("a transactional call's accept extends its channel's lease for its queue only while the lease is still the call's", async () => {
    const { channelId } = await openedChannel();
    const em = stack().orm.em.fork();
    const leaseFor = (token: string, seconds: number) =>
      em.execute(
        `update channels set busy_invocation = ?, busy_until = now() + make_interval(secs => ?) where id = ?`,
        [token, seconds, channelId],
      );
    const left = async () =>
      Number(
        (
          await em.execute<Array<{ left: number }>>(
            `select extract(epoch from busy_until - now())::float8 as left from channels where id = ?`,
            [channelId],
          )
        )[0]!.left,
      );
    // The admission's lease (LEASE_SECONDS), still the call's: extended.
    await leaseFor('call-a', 120);
    assert.equal(await keepAcceptedLease(em, { id: channelId, leaseToken: 'call-a' }), true);
    assert.ok((await left()) > TRANSACTIONAL_LEASE_SECONDS - 60);
    // Lapsed before the accept, or taken by another call: nothing extended, the call not accepted.
    await leaseFor('call-a', -1);
    assert.equal(await keepAcceptedLease(em, { id: channelId, leaseToken: 'call-a' }), false);
    await leaseFor('call-b', 120);
    assert.equal(await keepAcceptedLease(em, { id: channelId, leaseToken: 'call-a' }), false);
    assert.ok((await left()) <= 120);
  });

  it('a transactional call whose channel lease lapsed in its queue and was taken by another call is never sent: payment_lapsed, nothing charged', async () => {
    const { agentId, pay, channelId } = await openedChannel();
    // An API whose transactional calls wait on a task queue no worker polls yet.
    const taskQueue = `parked-${randomUUID()}`;
    const parked = await startApiProcess({ TEMPORAL_TASK_QUEUE: taskQueue });
    let worker: Awaited<ReturnType<typeof startWorkerProcess>> | undefined;
    try {
      const accepted = await pay(`${parked.url}/v1/proxy/${agentId}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' },
        body: '{}',
      });
      const acceptedText = await accepted.text();
      assert.equal(accepted.status, 202, acceptedText);
      const waiting = (JSON.parse(acceptedText) as { invocation_id: string }).invocation_id;
      const lease = (await channelRow(channelId)).busy_invocation;
      assert.ok(lease, 'the waiting call holds its channel');
      // Admitted for LEASE_SECONDS, the lease was extended by the accept for the call's queue.
      const [{ left }] = await stack()
        .orm.em.fork()
        .getConnection()
        .execute<Array<{ left: number }>>(
          `select extract(epoch from busy_until - now())::float8 as left from channels where id = ?`,
          [channelId],
        );
      assert.ok(left > TRANSACTIONAL_LEASE_SECONDS - 60 && left <= TRANSACTIONAL_LEASE_SECONDS, String(left));
      // Its queue outlasts its lease (made to lapse here), and another call takes the channel,
      // admitted against the same charged total: the voucher ceiling the waiting call was paid by.
      await stack()
        .orm.em.getConnection()
        .execute(`update channels set busy_until = now() - interval '1 second' where id = ?`, [channelId]);
      const callsBefore = upstreamCalls;
      const other = await paidStream(pay, agentId);
      assert.equal(other.status, 200, other.text);
      await waitForRow(other.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal(upstreamCalls, callsBefore + 1);
      // The waiting call's attempt now runs: its lease is another's, so it is closed unsent.
      worker = await startWorkerProcess(taskQueue);
      const row = await waitForRow(waiting, (r) => r.status === 'failed', 30_000);
      assert.equal(row.errorClass, 'payment_lapsed');
      assert.equal(row.attempts, 0, 'never sent');
      assert.equal(upstreamCalls, callsBefore + 1, 'the upstream was not called for it');
      await waitForRow(waiting, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await invocationRow(waiting))!.paymentCharge, '0');
      // The deposit's call and the other call: each charged once, within the vouchers signed.
      const channel = await channelRow(channelId);
      assert.equal(channel.charged_cumulative, String(2n * CEILING));
      assert.ok(BigInt(channel.signed_max_claimable!) >= 2n * CEILING);
      // The payer's next call is served, from the channel's true state.
      const next = await paidStream(pay, agentId);
      assert.equal(next.status, 200, next.text);
      await waitForRow(next.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING));
    } finally {
      if (worker) await stopWorkerProcess(worker);
      parked.child.kill('SIGKILL');
      await exited(parked.child);
    }
  });

  it('a held call completes its row with its charge in one statement, or at once when earlier charges are still being written', async () => {
    const { agentId, pay, channelId } = await openedChannel();
    // A voucher call first: this process holds the channel from then on (no statement on the
    // channel's row before a call is served).
    const holding = await paidStream(pay, agentId);
    assert.equal(holding.status, 200, holding.text);
    await waitForRow(holding.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    // The channel's row locked elsewhere: the next charge's write waits on it.
    const locker = new pg.Client({ connectionString: stack().config.databaseUrl });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('select 1 from channels where id = $1 for update', [channelId]);
      const first = await paidStream(pay, agentId);
      assert.equal(first.status, 200, first.text);
      // Its completion shares its charge's statement, which waits on the lock: not yet completed.
      const second = await paidStream(pay, agentId);
      assert.equal(second.status, 200, second.text);
      // Behind the first charge, the second call's row completes at once (a process lost now
      // leaves it completed, for the due-charges round to charge it in full).
      const completed = await waitForRow(second.id!, (r) => r.status === 'succeeded', 10_000);
      assert.equal(completed.paymentSettlement, null, 'its charge waits behind the first');
      assert.equal((await invocationRow(first.id!))!.status, 'running');
      await locker.query('rollback');
      for (const id of [first.id!, second.id!]) {
        const row = await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
        assert.equal(row.status, 'succeeded');
        assert.equal(row.paymentCharge, String(CEILING));
      }
      assert.equal((await channelRow(channelId)).charged_cumulative, String(4n * CEILING));
    } finally {
      await locker.end();
    }
  });

  it('serializes one channel across two API replicas: every served call is charged once, no voucher counted twice', async () => {
    const agentId = await channelAgent(newPayTo());
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { fetch: pay } = channelClient(payer);
    // The channel exists first (one deposit), then calls race through both replicas.
    const opened = await paidStream(pay, agentId);
    assert.equal(opened.status, 200, opened.text);
    const other = await startApiProcess();
    try {
      const bases = [stack().apiUrl, other.url];
      const calls = await Promise.all(
        Array.from({ length: 6 }, async (_, i) => {
          const res = await pay(`${bases[i % 2]}/v1/proxy/${agentId}/stream`, {
            method: 'POST',
            headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' },
            body: '{}',
          });
          const text = await res.text();
          return { status: res.status, id: res.headers.get('x-gateway-invocation-id'), text };
        }),
      );
      // A call whose voucher lost the race is told so (402) or served after recovering (200); none is a 5xx.
      for (const call of calls) assert.ok(call.status === 200 || call.status === 402, `${call.status} ${call.text}`);
      const served = [opened, ...calls.filter((c) => c.status === 200)];
      for (const call of served) await waitForRow(call.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      const channelId = (await invocationRow(opened.id!))!.paymentChannel!;
      const channel = await channelRow(channelId);
      assert.equal(
        channel.charged_cumulative,
        String(BigInt(served.length) * CEILING),
        'each served call charged once',
      );
      assert.ok(
        BigInt(channel.signed_max_claimable!) >= BigInt(channel.charged_cumulative!),
        "within the payer's voucher",
      );
    } finally {
      other.child.kill('SIGKILL');
      await exited(other.child);
    }
  });
  it('an API process killed mid-stream: the charge is committed once by the due-charges round, and the channel is let go', async () => {
    const { agentId, pay, channelId } = await openedChannel();

    const api = await startApiProcess();
    let id: string;
    try {
      const res = await pay(`${api.url}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json', 'x-hold': '1' },
        body: '{}',
      });
      assert.equal(res.status, 200);
      id = res.headers.get('x-gateway-invocation-id')!;
      const reader = res.body!.getReader();
      assert.match(new TextDecoder().decode((await reader.read()).value), /first/);
      reader.read().catch(() => undefined); // the connection breaks when the process dies
      // What the call will be charged (its ceiling, once answered) reaches the running row.
      await waitForRow(id, (r) => r.status === 'running' && r.paymentCharge === String(CEILING), 10_000);
    } finally {
      api.child.kill('SIGKILL');
      await exited(api.child);
    }
    assert.equal((await channelRow(channelId)).busy_invocation !== null, true, 'the dead call still holds the channel');
    // The sweep fails the rows of owners whose database sessions are gone (a killed process's, once
    // PostgreSQL has seen its connections close).
    await waitFor(
      async () => (await failStaleStreams(stack().orm)) >= 0 && (await invocationRow(id))?.status === 'failed',
      { timeoutMs: 60_000, everyMs: 200, what: `the lost stream ${id} failed by the sweep` },
    );
    await settleLostCharge(id);
    const channel = await channelRow(channelId);
    assert.equal(channel.charged_cumulative, String(2n * CEILING), 'charged once');
    assert.equal(channel.busy_invocation, null);
    // The payer's next call finds its channel free and its charged total where the client expects it.
    const next = await paidStream(pay, agentId);
    assert.equal(next.status, 200, next.text);
  });
  it('50 paid calls on one channel, streamed and transactional, then one claim and one settle collect all 50 charges', async () => {
    // Setup: the stack's claim round starts a tenant's round as soon as it has unclaimed charges;
    // marking its last round now (and a long period) leaves the round to this test.
    await stack()
      .orm.em.getConnection()
      .execute(
        `update settlement_configs set claim_round_at = now(), claim_every_seconds = 86400 where tenant_id = ?`,
        [paying.tenant],
      );
    const payTo = newPayTo();
    const deposit = 60n * CEILING;
    const agentId = await createAgent(paying.token, {
      upstream_url: upstream.url,
      pricing: {
        scheme: 'batch-settlement',
        amount: String(CEILING),
        asset: 'USDC',
        network: 'base',
        pay_to: payTo,
        min_deposit: String(deposit),
        withdraw_delay: 900,
      },
    });
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const before = await balanceOf(paying.provider, payer.address);
    const { fetch: pay } = channelClient(payer);
    const ids: string[] = [];
    for (let i = 0; i < 50; i++) {
      const streamed = i % 2 === 0;
      const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}${streamed ? '/stream' : ''}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' },
        body: '{}',
      });
      const text = await res.text();
      assert.equal(res.status, streamed ? 200 : 202, text);
      ids.push(streamed ? res.headers.get('x-gateway-invocation-id')! : JSON.parse(text).invocation_id);
    }
    for (const id of ids) await waitForRow(id, (r) => r.paymentSettlement === 'settled', 30_000);
    assert.equal(await balanceOf(paying.provider, payer.address), before - deposit, 'one deposit moved the payer');
    const channelId = (await invocationRow(ids[0]!))!.paymentChannel!;
    assert.equal((await channelRow(channelId)).charged_cumulative, String(50n * CEILING));

    const handle = await startChannelClaims(
      stack().temporal,
      stack().config.temporal.taskQueue,
      { tenantId: paying.tenant, reason: 'test' },
      10_000,
    );
    const result = (await handle.result()) as {
      claims: Array<{
        state: string;
        transaction: string | null;
        claimed: Array<{ channel: string; totalClaimed: string }>;
      }>;
      settles: Array<{ receiver: string; amount: string; transaction: string | null }>;
    };
    const claiming = result.claims.filter((c) => c.claimed.some((row) => row.channel === channelId));
    assert.equal(claiming.length, 1, 'one claim');
    assert.match(String(claiming[0]!.transaction), /^0x[0-9a-f]{64}$/);
    assert.deepEqual(await onChain(paying.provider, channelId), { balance: deposit, totalClaimed: 50n * CEILING });
    const settled = result.settles.filter((x) => x.receiver.toLowerCase() === payTo.toLowerCase());
    assert.equal(settled.length, 1, 'one settle');
    assert.equal(settled[0]!.amount, String(50n * CEILING));
    assert.equal(await balanceOf(paying.provider, payTo), 50n * CEILING, 'the receiver is paid all 50 charges');
  });
  it('a charge its voucher no longer covers adds nothing, and the channel is still let go; a running call renews its hold', async () => {
    const { agentId, pay, channelId } = await openedChannel();
    const { res, end } = await heldStream(pay, agentId);
    assert.equal(res.status, 200);
    const id = res.headers.get('x-gateway-invocation-id')!;
    const body = res.text();
    const sql = stack().orm.em.getConnection();
    const holder = async () =>
      (
        await sql.execute<Array<{ busy_invocation: string | null; busy_until_ms: string | null }>>(
          `select busy_invocation, (extract(epoch from busy_until) * 1000000)::bigint::text as busy_until_ms from channels where id = ?`,
          [channelId],
        )
      )[0]!;
    const during = await holder();
    assert.ok(during.busy_invocation, 'the running call holds its channel');
    // The process holding the channel renews its lease while the call runs: its end moves later,
    // under the same token.
    await waitFor(
      async () => {
        const now = await holder();
        assert.equal(now.busy_invocation, during.busy_invocation, 'the same hold');
        return Number(now.busy_until_ms) > Number(during.busy_until_ms);
      },
      { timeoutMs: HOLD_RENEW_EVERY_MS * 2 + 5_000, everyMs: 200, what: 'the running call’s hold renewed' },
    );
    // Another commit moved the channel's charged total meanwhile (as a call admitted after a lapsed hold would).
    await sql.execute(`update channels set charged_cumulative = charged_cumulative + 1 where id = ?`, [channelId]);
    end();
    assert.match(await body, /last/);
    const row = await waitForRow(id, (r) => r.paymentSettlement === 'failed', 15_000);
    assert.equal(row.paymentSettleError, 'voucher_exceeded');
    assert.equal((await channelRow(channelId)).charged_cumulative, String(CEILING + 1n), 'nothing added');
    // The serving process held the channel between calls; unused, it lets it go.
    await waitFor(async () => (await holder()).busy_invocation === null, {
      timeoutMs: 15_000,
      what: 'the channel let go',
    });
  });
  it('a call closed before it reached its upstream lets its channel go at once, charged nothing (channels not held between calls)', async () => {
    const { agentId, pay, channelId } = await openedChannel();
    // A process that keeps no channel between calls: each voucher takes the channel's lease for
    // its call and binds its payment before it is forwarded (the forwarding mark).
    const api = await startApiProcess({ CHANNEL_HOLD_IDLE_MS: '0' });
    try {
      const { res, end } = await heldStream(pay, agentId, api.url);
      assert.equal(res.status, 200);
      const id = res.headers.get('x-gateway-invocation-id')!;
      const body = res.text();
      assert.ok((await channelRow(channelId)).busy_invocation, 'the call holds its channel');
      // What a paid stream's own process does when its forwarding mark fails: the row is closed as
      // never forwarded and its payment released, in one statement.
      await closeUnforwarded(stack().orm, id);
      assert.equal((await channelRow(channelId)).busy_invocation, null, 'the released payment lets its channel go');
      // The payer's next call is served now (its client counted the released call: corrected once).
      const started = Date.now();
      const next = await paidStream(pay, agentId, {}, paying.token, api.url);
      assert.equal(next.status, 200, next.text);
      assert.ok(Date.now() - started < 5_000, 'not held until the lease lapsed');
      await waitForRow(next.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      end();
      await body.catch(() => undefined);
      await settleLostCharge(id);
      const released = (await invocationRow(id))!;
      assert.equal(released.paymentCharge, '0');
      assert.equal(released.paymentSettleError, null);
      assert.equal(
        (await channelRow(channelId)).charged_cumulative,
        String(2n * CEILING),
        'the released call charged nothing',
      );
    } finally {
      api.child.kill('SIGKILL');
      await exited(api.child);
    }
  });
  it('a payer with a timed withdrawal pending is refused, and what it was charged is claimed before the withdrawal can finalize', async () => {
    const { agentId, pay, channelId, payer } = await openedChannel();
    const sql = stack().orm.em.getConnection();
    const [{ config }] = await sql.execute<Array<{ config: Record<string, unknown> }>>(
      `select config from channels where id = ?`,
      [channelId],
    );
    const initiated = await (
      await batchSettlementContract(payer.connect(paying.provider)).initiateWithdraw!(config, MIN_DEPOSIT)
    ).wait();
    const initiatedAt = (await paying.provider.getBlock(initiated.blockNumber))!.timestamp;
    // The admission reads the chain again once its mirror is a minute old: it is, now.
    await sql.execute(`update channels set onchain_synced_at = now() - interval '2 minutes' where id = ?`, [channelId]);
    const callsBefore = upstreamCalls;
    const refused = await paidStream(pay, agentId);
    assert.equal(refused.status, 402, refused.text);
    assert.match(refused.text, /invalid_batch_settlement_evm_withdrawal_pending/);
    assert.equal(upstreamCalls, callsBefore, 'the upstream is not called');
    assert.equal(
      (await channelRow(channelId)).charged_cumulative,
      String(CEILING),
      'the refused call is charged nothing',
    );
    // The claims round (as an API process runs it, with its own gap between urgent rounds) sees
    // the withdrawal the admission mirrored and starts the tenant's round for it, though the
    // tenant's period is a day and its last round half a minute ago.
    await sql.execute(
      `update settlement_configs set claim_every_seconds = 86400, claim_round_at = now() - interval '31 seconds'
        where tenant_id = ?`,
      [paying.tenant],
    );
    const round = startDueClaims({
      orm: stack().orm,
      temporal: stack().temporal,
      taskQueue: stack().config.temporal.taskQueue,
      rpc: stack().config.payment.contractSignatures,
      log: createLogger('api', 'silent'),
      everyMs: 0,
    });
    try {
      assert.ok((await round.runOnce()) >= 1, 'a round started');
    } finally {
      await round.stop();
    }
    const handle = stack().temporal.workflow.getHandle(claimWorkflowId(paying.tenant));
    assert.match(String(await (await handle.describe()).staticSummary()), /\(withdrawal\)$/);
    await handle.result();
    assert.equal((await onChain(paying.provider, channelId)).totalClaimed, CEILING, 'the charged call claimed');
    const block = await paying.provider.getBlock('latest');
    assert.ok(block!.timestamp < initiatedAt + 900, 'claimed before the withdrawal can finalize');
  });
  it('a refund sent again is answered as the first, nothing refunded twice; what was charged is claimed with it', async () => {
    const { agentId, pay, channelId, payer, scheme } = await openedChannel();
    const second = await paidStream(pay, agentId);
    assert.equal(second.status, 200, second.text);
    await waitForRow(second.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    // The refund the client sends (as a POST), its payment header kept.
    const { asPost, sent } = refundSender();
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const settled = await scheme.refund(url, { fetch: asPost, amount: String(5n * CEILING) });
    assert.equal(settled.success, true);
    assert.equal(sent.length, 1);
    const balance = await balanceOf(paying.provider, payer.address);
    const state = await onChain(paying.provider, channelId);
    // The charged calls were claimed in the refund's transaction, before the escrow went back.
    assert.equal(state.totalClaimed, 2n * CEILING);
    assert.equal(state.balance, MIN_DEPOSIT - 5n * CEILING);

    // The same refund again (a client's retry, a replay): the first answer, nothing moves.
    const again = await sentAgain(url, sent[0]!);
    const text = await again.text();
    assert.equal(again.status, 200, text);
    const answer = JSON.parse(text) as { refunded: string; transaction: string };
    assert.equal(answer.refunded, String(5n * CEILING));
    assert.equal(answer.transaction, settled.transaction);
    assert.equal(await balanceOf(paying.provider, payer.address), balance, 'refunded once');
    assert.deepEqual(await onChain(paying.provider, channelId), state);
  });
  it('a refund the facilitator refused, replayed after later calls, is checked again and refused as stale: it never refunds what they were charged', async () => {
    const { agentId, pay, channelId, scheme } = await openedChannel();
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const { asPost, sent } = refundSender();
    // The tenant's settlement goes through another account of the same facilitator for a while:
    // one whose deposit did not open the channel, so the facilitator refuses its refund (and
    // keeps nothing of it), while the gateway has recorded it with its refund nonce.
    const settlement = await call('GET', '/v1/settlement/config', { token: paying.token });
    assert.equal(settlement.status, 200, settlement.text);
    const other = await newAccount(`refund-other-${randomUUID()}`);
    const otherCredential = await facilitatorCredential(paying.token, other, undefined, 'facilitator-client-other');
    const settleThrough = async (credentialRef: string) => {
      const res = await call('PUT', '/v1/settlement/config', {
        token: paying.token,
        json: { facilitator_url: settlement.json.facilitator_url, facilitator_credential_ref: credentialRef },
      });
      assert.ok(res.status === 200 || res.status === 201, `${res.status} ${res.text}`);
    };
    await settleThrough(otherCredential);
    try {
      await assert.rejects(scheme.refund(url, { fetch: asPost }));
    } finally {
      await settleThrough(settlement.json.facilitator_credential_ref as string);
      await other.client.close();
    }
    assert.equal(sent.length, 1, 'the refund was sent once');
    const before = await onChain(paying.provider, channelId);
    assert.equal(before.totalClaimed, 0n, 'nothing refunded or claimed');

    // Two more calls are served and charged.
    for (let i = 0; i < 2; i++) {
      const served = await paidStream(pay, agentId);
      assert.equal(served.status, 200, served.text);
      await waitForRow(served.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    }
    assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING));

    // The kept refund again: its voucher is what was charged before those calls, so it is the
    // corrective 402, and nothing moves on chain.
    const replay = await sentAgain(url, sent[0]!);
    const text = await replay.text();
    assert.equal(replay.status, 402, text);
    const corrective = decodePaymentRequiredHeader(replay.headers.get('payment-required')!);
    assert.equal(corrective.error, 'invalid_batch_settlement_evm_cumulative_amount_mismatch');
    assert.deepEqual(await onChain(paying.provider, channelId), before, 'nothing refunded');

    // A refund of what is charged now claims all three calls and returns the rest.
    const settled = await scheme.refund(url, {
      fetch: asPost,
    });
    assert.equal(settled.success, true);
    const after = await onChain(paying.provider, channelId);
    assert.equal(after.totalClaimed, 3n * CEILING, 'every served call claimed');
  });
  /**
   * The paying tenant's settlement pointed at a relay in front of its facilitator (a stalling
   * facilitator with these options) while `during` runs, then back.
   */
  async function throughRelay(
    options: Omit<Parameters<typeof startStallingFacilitator>[0], 'facilitatorUrl' | 'pki' | 'account'>,
    during: () => Promise<void>,
  ) {
    const settlement = await call('GET', '/v1/settlement/config', { token: paying.token });
    const settleAt = async (facilitatorUrl: string) => {
      const res = await call('PUT', '/v1/settlement/config', {
        token: paying.token,
        json: {
          facilitator_url: facilitatorUrl,
          facilitator_credential_ref: settlement.json.facilitator_credential_ref,
        },
      });
      assert.ok(res.status === 200 || res.status === 201, `${res.status} ${res.text}`);
    };
    const relay = await startStallingFacilitator({
      facilitatorUrl: stack().facilitator.url,
      pki: stack().infra.pki.files,
      account: paying.account.cert,
      ...options,
    });
    await settleAt(relay.url);
    try {
      await during();
    } finally {
      await settleAt(settlement.json.facilitator_url as string);
    }
    return relay;
  }

  it("a refund whose facilitator's answer was lost keeps its channel taken: no call is served that the refund would leave unclaimed", async () => {
    const { agentId, pay, channelId, scheme, payer } = await openedChannel();
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const { asPost } = refundSender();
    const before = await balanceOf(paying.provider, payer.address);
    // A relay that passes the refund to the real facilitator and drops its answer.
    const relay = await throughRelay({ dropAnswers: true }, async () => {
      await assert.rejects(scheme.refund(url, { fetch: asPost }));
      await waitFor(async () => (await balanceOf(paying.provider, payer.address)) > before, {
        timeoutMs: 30_000,
        what: 'the refund landed',
      });
    });
    await relay.close();
    // The refund claimed what was charged and returned the rest; the channel is still taken, so a
    // voucher sent now is not served (it would be charged on an escrow that is gone).
    const callsBefore = upstreamCalls;
    const busy = await paidStream(pay, agentId);
    assert.equal(busy.status, 402, busy.text);
    assert.match(busy.text, /channel_busy/);
    assert.equal(upstreamCalls, callsBefore, 'not forwarded');
    const state = await onChain(paying.provider, channelId);
    assert.equal(state.totalClaimed, CEILING, 'the charged call was claimed with the refund');
    assert.equal(state.balance, CEILING, 'the rest went back');
  });
  it('a refund whose outcome is still not known when its lease lapses is asked for again before the next call: one landing late never leaves a served call unclaimed', async () => {
    const { agentId, pay, channelId, scheme, payer } = await openedChannel();
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const { asPost } = refundSender();
    const before = await balanceOf(paying.provider, payer.address);
    const refundNonce = () => batchSettlementContract(paying.provider).refundNonce!(channelId) as Promise<bigint>;
    // A relay that closes the refund's connection unanswered, keeping it to pass on later.
    const relay = await throughRelay({ lateSettles: true }, async () => {
      await assert.rejects(scheme.refund(url, { fetch: asPost }));
    });
    // The refund's lease lapses (after LEASE_SECONDS: set past here, standing in for the wait).
    const lapse = () =>
      stack()
        .orm.em.fork()
        .getConnection()
        .execute(`update channels set busy_until = now() - interval '1 second' where id = ?`, [channelId]);
    try {
      assert.notEqual((await channelRow(channelId)).refund_in_doubt, null, 'the refund is in doubt');
      assert.equal(await refundNonce(), 0n, 'nothing landed yet');
      await lapse();

      // The facilitator still not answering: the next voucher waits for the refund, not served.
      const callsBefore = upstreamCalls;
      const down = await throughRelay({ lateSettles: true }, async () => {
        const waiting = await paidStream(pay, agentId);
        assert.equal(waiting.status, 503, waiting.text);
      });
      await down.close();
      assert.equal(upstreamCalls, callsBefore, 'not forwarded');
      assert.notEqual((await channelRow(channelId)).refund_in_doubt, null, 'still in doubt');
      await lapse();

      // Answering again: the refund is asked for first (it runs now), and the voucher, paying from
      // an escrow that is gone, is not served.
      const next = await paidStream(pay, agentId);
      assert.equal(next.status, 402, next.text);
      assert.equal(upstreamCalls, callsBefore, 'not forwarded');
      assert.equal(await refundNonce(), 1n, 'the refund landed, once');
      const refunded = await balanceOf(paying.provider, payer.address);
      assert.ok(refunded > before);
      assert.equal((await channelRow(channelId)).refund_in_doubt, null);

      // The refund the relay kept lands late: the facilitator answers it as the same refund.
      const late = (await relay.passLate()) as Array<{ success?: boolean }>;
      assert.ok(late.length >= 1);
      assert.ok(
        late.every((answer) => answer.success === true),
        JSON.stringify(late),
      );
      assert.equal(await refundNonce(), 1n, 'nothing refunded twice');
      assert.equal(await balanceOf(paying.provider, payer.address), refunded);
      const state = await onChain(paying.provider, channelId);
      assert.equal(state.totalClaimed, CEILING, 'the charged call was claimed with the refund');
    } finally {
      await relay.close();
    }
  });
  it('a channel opened paying one tenant is refused by another naming the same receiver, with its own reason; nothing of it is shared', async () => {
    // Two tenants name the same receiver through the same facilitator: the same channel terms.
    const payTo = newPayTo();
    const agentA = await channelAgent(payTo);
    const other = await settlingTenant(`batch-calls-other-${randomUUID()}`, paying.account);
    const agentB = await channelAgent(payTo, other);
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { fetch: pay } = channelClient(payer);
    const opened = await paidStream(pay, agentA);
    assert.equal(opened.status, 200, opened.text);
    const channelId = (await invocationRow(opened.id!))!.paymentChannel!;
    await waitForRow(opened.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    const before = await channelRow(channelId);

    const callsBefore = upstreamCalls;
    const refused = await paidStream(pay, agentB, {}, other);
    assert.equal(refused.status, 402, refused.text);
    assert.match(refused.text, /invalid_batch_settlement_evm_channel_of_another_seller/);
    assert.equal(upstreamCalls, callsBefore, 'the upstream is not called');
    assert.deepEqual(await channelRow(channelId), before, "the first tenant's channel is untouched");
    const listed = await fetch(`${stack().apiUrl}/v1/channels`, { headers: { authorization: `Bearer ${other}` } });
    assert.deepEqual(await listed.json(), { data: [], next_cursor: null }, 'the other tenant holds no channel');
    // The first tenant's agent is still paid from it.
    const next = await paidStream(pay, agentA);
    assert.equal(next.status, 200, next.text);
  });
  it('a voucher resent under its payment identifier gets the first call back, not a second charge', async () => {
    const agentId = await channelAgent(newPayTo());
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { fetch: pay, client } = channelClient(payer);
    const opened = await paidStream(pay, agentId);
    assert.equal(opened.status, 200, opened.text);
    await waitForRow(opened.id!, (r) => r.paymentSettlement === 'settled', 15_000);
    const channelId = (await invocationRow(opened.id!))!.paymentChannel!;

    const { url, auth, payload } = await paymentFor(client, agentId);
    assert.equal((payload.payload as { type: string }).type, 'voucher');
    payload.extensions = appendPaymentIdentifierToExtensions(payload.extensions ?? {}, generatePaymentId());
    const headers = { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(payload) };
    const first = await fetch(url, { method: 'POST', headers, body: '{}' });
    assert.equal(first.status, 200, await first.text());
    const id = first.headers.get('x-gateway-invocation-id')!;
    await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
    const callsBefore = upstreamCalls;

    // The same payment again (its answer lost): the first call's answer, nothing charged or forwarded.
    const again = await fetch(url, { method: 'POST', headers, body: '{}' });
    const text = await again.text();
    assert.equal(again.status, 202, text);
    assert.deepEqual(JSON.parse(text), { invocation_id: id });
    assert.equal(again.headers.get('x-gateway-invocation-id'), id);
    assert.equal(upstreamCalls, callsBefore, 'not forwarded again');
    assert.equal((await channelRow(channelId)).charged_cumulative, String(2n * CEILING), 'charged once');
  });

  it('a voucher resent under its payment identifier after its first admission was never accepted waits only while that lease holds', async () => {
    // What a process that died between a voucher's admission and its accept leaves: the binding,
    // named by its lease, never bound, and the lease on the channel.
    const em = stack().orm.em.fork();
    const channelId = `0x${randomUUID().replaceAll('-', '')}${randomUUID().replaceAll('-', '')}`;
    const offered = {
      tenantId: `tenant-${randomUUID()}`,
      agentId: `agent-${randomUUID()}`,
      payer: '0x00000000000000000000000000000000000000aa',
      nonce: `voucher-${randomUUID()}`,
      paymentId: `pay_${randomUUID()}`,
      dialect: 'v2' as const,
    };
    await em.execute(
      `insert into channels (id, tenant_id, payer, receiver, receiver_authorizer, config, busy_invocation, busy_until)
       values (?, ?, ?, '0x01', '0x02', '{}'::jsonb, 'lease-a', now() + interval '60 seconds')`,
      [channelId, offered.tenantId, offered.payer],
    );
    await em.execute(
      `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, payment_id, signed_payment)
       values (?, ?, ?, 'base', '0xasset', ?, ?, '1', 'claimed', ?, ?::jsonb)`,
      [
        `pay_${randomUUID()}`,
        offered.tenantId,
        offered.agentId,
        offered.payer,
        `${offered.nonce}-lease-a`,
        offered.paymentId,
        JSON.stringify({ payment: { payload: { voucher: { channelId } } }, channelLease: 'lease-a' }),
      ],
    );
    const config = stack().config.payment;
    // Its lease still running: the first admission may yet be accepted.
    await assert.rejects(answerKnownChannelIdentifier(em, config, offered), PaymentStillSettling);
    // Its lease lapsed: that admission can no longer be accepted, and this attempt is the call.
    await em.execute(`update channels set busy_until = now() - interval '1 second' where id = ?`, [channelId]);
    await answerKnownChannelIdentifier(em, config, offered);
    const [claim] = await em.execute<Array<{ payment_id: string | null }>>(
      `select payment_id from payment_claims where tenant_id = ? and nonce = ?`,
      [offered.tenantId, `${offered.nonce}-lease-a`],
    );
    assert.equal(claim?.payment_id, null, 'its identifier given up');
  });

  it('a channel whose payer signs its own vouchers (no payer authorizer) is refused before any deposit: its vouchers could be made unclaimable', async () => {
    const agentId = await channelAgent(newPayTo());
    const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
    const { client } = channelClient(payer, { payerAuthorizer: ZERO_ADDRESS });
    const { url, auth, payload } = await paymentFor(client, agentId);
    const deposit = payload.payload as { type: string; channelConfig: { payerAuthorizer: string } };
    assert.equal(deposit.type, 'deposit');
    assert.equal(BigInt(deposit.channelConfig.payerAuthorizer), 0n);
    const before = await balanceOf(paying.provider, payer.address);
    const callsBefore = upstreamCalls;
    const refused = await fetch(url, {
      method: 'POST',
      headers: { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(payload) },
      body: '{}',
    });
    assert.equal(refused.status, 402, await refused.text());
    assert.equal(upstreamCalls, callsBefore, 'not forwarded');
    assert.equal(await balanceOf(paying.provider, payer.address), before, 'nothing deposited');
  });

  it("a call's lease is renewed from its binding while its request is still arriving, not from its answer's first byte", async () => {
    const { agentId, client, channelId } = await openedChannel();
    const { url, auth, payload } = await paymentFor(client, agentId);
    // A payment identifier: the call takes the channel's lease for itself (not a hold).
    payload.extensions = appendPaymentIdentifierToExtensions(payload.extensions ?? {}, generatePaymentId());
    const leaseEnd = async () => {
      const [row] = await stack()
        .orm.em.getConnection()
        .execute<Array<{ until: Date | null }>>(`select busy_until as until from channels where id = ?`, [channelId]);
      return row?.until ? new Date(row.until).getTime() : 0;
    };
    const { request } = await import('node:http');
    const req = request(url, {
      method: 'POST',
      // The upstream answers once it has read the whole body (test/support/upstream.ts).
      headers: { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(payload) },
    });
    const answered = new Promise<number>((resolve, reject) => {
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
    });
    req.write('{"slow":');
    try {
      // Its own lease (not the opening call's short hold), taken as the call was admitted...
      const taken = await waitFor(
        async () => {
          const end = await leaseEnd();
          return end > Date.now() + (HOLD_LEASE_SECONDS + 30) * 1000 && end;
        },
        { timeoutMs: 10_000, what: "the call's own lease" },
      );
      // ...renewed while the rest of its body has not come.
      await waitFor(async () => (await leaseEnd()) > taken + 1_000, {
        timeoutMs: LEASE_RENEW_EVERY_MS + 15_000,
        what: 'the lease renewed while the request arrives',
      });
    } finally {
      req.end('true}');
    }
    assert.equal(await answered, 200);
  });

  describe('channels held between calls', () => {
    const holder = async (channelId: string) => (await channelRow(channelId)).busy_invocation;
    const agentRows = async (agentId: string) =>
      Number(
        (
          await stack()
            .orm.em.getConnection()
            .execute<Array<{ n: string }>>(`select count(*)::text as n from invocations where agent_id = ?`, [agentId])
        )[0]!.n,
      );

    it('back-to-back vouchers keep the process hold: one lease for all, each charge committed, the channel let go once unused', async () => {
      const { agentId, pay, channelId } = await openedChannel();
      const ids: string[] = [];
      const tokens = new Set<string | null>();
      for (let i = 0; i < 4; i++) {
        const call = await paidStream(pay, agentId);
        assert.equal(call.status, 200, call.text);
        ids.push(call.id!);
        tokens.add(await holder(channelId));
      }
      assert.equal(tokens.size, 1, 'the same hold served every voucher');
      assert.notEqual([...tokens][0], null, 'held between the calls');
      for (const id of ids) await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(5n * CEILING));
      // CHANNEL_HOLD_IDLE_MS (2 s by default) unused: let go.
      await waitFor(async () => (await holder(channelId)) === null, { timeoutMs: 15_000, what: 'the hold let go' });
    });

    it("another process's call on a held channel is served at once: the holder lets it go when asked, and when it stops", async () => {
      const { agentId, pay, channelId } = await openedChannel();
      // A process that would keep an unused channel for a minute.
      const keeper = await startApiProcess({ CHANNEL_HOLD_IDLE_MS: '60000' });
      try {
        const kept = await paidStream(pay, agentId, {}, paying.token, keeper.url);
        assert.equal(kept.status, 200, kept.text);
        assert.notEqual(await holder(channelId), null, 'held by the keeper');
        // Asked for through the change feed by the other process's lease, the keeper lets go.
        const started = Date.now();
        const elsewhere = await paidStream(pay, agentId);
        assert.equal(elsewhere.status, 200, elsewhere.text);
        assert.ok(Date.now() - started < 5_000, `served in ${Date.now() - started} ms, not after the keeper's minute`);
        for (const id of [kept.id!, elsewhere.id!])
          await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
        assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING), 'each served call once');
        // Back on the keeper, then the keeper stops: it lets the channel go as it stops.
        const again = await paidStream(pay, agentId, {}, paying.token, keeper.url);
        assert.equal(again.status, 200, again.text);
        await waitForRow(again.id!, (r) => r.paymentSettlement === 'settled', 15_000);
        keeper.child.kill('SIGTERM');
        await exited(keeper.child);
        assert.equal(await holder(channelId), null, 'let go by the stopping process');
      } finally {
        keeper.child.kill('SIGKILL');
        await exited(keeper.child);
      }
    });

    it('a process killed while it holds a channel idle keeps it from the payer for its short hold lease, not the call lease', async () => {
      const { agentId, pay, channelId } = await openedChannel();
      const keeper = await startApiProcess({ CHANNEL_HOLD_IDLE_MS: '60000' });
      try {
        const kept = await paidStream(pay, agentId, {}, paying.token, keeper.url);
        assert.equal(kept.status, 200, kept.text);
        await waitForRow(kept.id!, (r) => r.paymentSettlement === 'settled', 15_000);
        const token = await holder(channelId);
        assert.notEqual(token, null, 'held by the keeper');
        // The short lease is renewed while held: it runs further on under the same token.
        const leaseEnd = async () =>
          Number(
            (
              await stack()
                .orm.em.getConnection()
                .execute<Array<{ ms: string }>>(
                  `select (extract(epoch from busy_until) * 1000)::bigint::text as ms from channels where id = ? and busy_invocation = ?`,
                  [channelId, token],
                )
            )[0]?.ms ?? 0,
          );
        const first = await leaseEnd();
        assert.ok(first > 0);
        await waitFor(async () => (await leaseEnd()) > first, {
          timeoutMs: HOLD_RENEW_EVERY_MS + 5_000,
          everyMs: 200,
          what: 'the hold renewed',
        });
      } finally {
        // Dead with no call running: no lost stream for the sweep to find, nothing lets the channel go.
        keeper.child.kill('SIGKILL');
        await exited(keeper.child);
      }
      const killed = Date.now();
      let busy = 0;
      const served = await waitFor(
        async () => {
          const res = await paidStream(pay, agentId);
          if (res.status !== 200) {
            assert.equal(res.status, 402, res.text);
            assert.match(res.text, /channel_busy/);
            busy++;
          }
          return res.status === 200 && res;
        },
        {
          timeoutMs: (HOLD_LEASE_SECONDS + 15) * 1000,
          everyMs: 500,
          what: 'the channel taken over from the dead holder',
        },
      );
      const after = Date.now() - killed;
      assert.ok(busy > 0, "busy while the dead holder's lease ran");
      assert.ok(after < (HOLD_LEASE_SECONDS + 10) * 1000, `served ${after} ms after the kill`);
      await waitForRow(served.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING), 'each served call once');
    });

    it('a voucher whose signature does not hold on a held channel: 402, nothing forwarded, nothing of it kept; the genuine one is served', async () => {
      const { agentId, channelId, scheme, pay } = await openedChannel();
      const client = new x402Client().register('eip155:*', scheme);
      client.setSpendControls({
        allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }],
      });
      const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
      const auth = { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' };
      // The channel held by this process: one voucher served first (the client keeps its state
      // from the answer).
      const served = await paidStream(pay, agentId);
      assert.equal(served.status, 200, served.text);
      assert.notEqual(await holder(channelId), null);

      const res = await fetch(url, { method: 'POST', headers: auth, body: '{}' });
      assert.equal(res.status, 402);
      const genuine = await client.createPaymentPayload(
        decodePaymentRequiredHeader(res.headers.get('payment-required')!),
      );
      // Its r changed: a well-formed signature by nobody this channel names.
      const forged = forgedVoucher(genuine);
      const rowsBefore = await agentRows(agentId);
      const callsBefore = upstreamCalls;
      const refused = await fetch(url, {
        method: 'POST',
        headers: { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(forged) },
        body: '{}',
      });
      const refusal = await refused.text();
      assert.equal(refused.status, 402, refusal);
      // Refused for its signature, its terms (the cumulative ceiling) being right.
      assert.doesNotMatch(refusal, /cumulative/);
      assert.ok(refused.headers.get('payment-required'), 'the challenge again');
      assert.equal(upstreamCalls, callsBefore, 'not forwarded');
      await waitFor(async () => (await agentRows(agentId)) === rowsBefore, {
        timeoutMs: 5_000,
        what: 'no row left of the forged voucher',
      });
      assert.equal((await channelRow(channelId)).charged_cumulative, String(2n * CEILING), 'nothing charged');

      const paid = await fetch(url, {
        method: 'POST',
        headers: { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(genuine) },
        body: '{}',
      });
      assert.equal(paid.status, 200, await paid.text());
      await waitForRow(paid.headers.get('x-gateway-invocation-id')!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING));
    });

    it('a call that gave up waiting for its turn does not leave the channel held: let go once unused after the long call ends', async () => {
      const { agentId, pay, channelId } = await openedChannel();
      // A long stream holds the channel's turn here.
      const { res: long, end } = await heldStream(pay, agentId, stack().apiUrl, true);
      assert.equal(long.status, 200);
      const longBody = long.text();
      // A second call waits for the turn past CHANNEL_WAIT_MS and is told the channel is busy.
      const waiting = await paidStream(pay, agentId);
      assert.equal(waiting.status, 402, waiting.text);
      assert.match(waiting.text, /channel_busy/);
      end();
      assert.match(await longBody, /last/);
      await waitFor(async () => (await holder(channelId)) === null, {
        timeoutMs: 15_000,
        what: 'the hold let go once unused',
      });
    });

    it("the due-charges round never lets a live process's hold go; a forged voucher elsewhere neither takes it nor asks for it", async () => {
      const { agentId, pay, channelId, scheme } = await openedChannel();
      const keeper = await startApiProcess({ CHANNEL_HOLD_IDLE_MS: '60000' });
      try {
        const sql = stack().orm.em.getConnection();
        // A held call, its binding read while it runs (its commit lets the signed voucher go).
        const { res: running, end } = await heldStream(pay, agentId, keeper.url);
        assert.equal(running.status, 200);
        const keptId = running.headers.get('x-gateway-invocation-id')!;
        const [binding] = await sql.execute<Array<{ signed_payment: unknown }>>(
          `select signed_payment from payment_claims where invocation_id = ?`,
          [keptId],
        );
        end();
        // The binding keeps the voucher its charge is committed under and the call's lease, no
        // more of the payment (the channel's row has the rest).
        const kept = binding!.signed_payment as { payment: { payload: { voucher: Record<string, string> } } };
        assert.deepEqual(Object.keys(kept).sort(), ['channelLease', 'payment']);
        assert.deepEqual(Object.keys(kept.payment), ['payload']);
        assert.deepEqual(Object.keys(kept.payment.payload), ['voucher']);
        assert.equal(kept.payment.payload.voucher.channelId.toLowerCase(), channelId);
        assert.match(kept.payment.payload.voucher.signature, /^0x[0-9a-fA-F]{130}$/);
        assert.match(await running.text(), /last/);
        await waitForRow(keptId, (r) => r.paymentSettlement === 'settled', 15_000);
        const token = await holder(channelId);
        assert.match(String(token), /^hold-/);
        // The round commits that charge as it would had the holder's own commit failed: the hold stays.
        await sql.execute(`update invocations set payment_settlement = null where id = ?`, [keptId]);
        await sql.execute(`update channels set charged_cumulative = charged_cumulative - ? where id = ?`, [
          String(CEILING),
          channelId,
        ]);
        await sql.execute(
          `update payment_claims set status = 'claimed', signed_payment = ?::jsonb where invocation_id = ?`,
          [JSON.stringify(binding!.signed_payment), keptId],
        );
        await settleLostCharge(keptId);
        assert.equal(await holder(channelId), token, "the holder's lease kept");

        // A forged voucher sent to another process: refused for its signature before it takes the
        // lease or asks the holder for it.
        const client = new x402Client().register('eip155:*', scheme);
        client.setSpendControls({
          allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }],
        });
        const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
        const auth = { authorization: `Bearer ${paying.token}`, 'content-type': 'application/json' };
        const res = await fetch(url, { method: 'POST', headers: auth, body: '{}' });
        const forged = forgedVoucher(
          await client.createPaymentPayload(decodePaymentRequiredHeader(res.headers.get('payment-required')!)),
        );
        const refused = await fetch(url, {
          method: 'POST',
          headers: { ...auth, 'PAYMENT-SIGNATURE': encodePaymentSignatureHeader(forged) },
          body: '{}',
        });
        assert.equal(refused.status, 402, await refused.text());
        assert.equal(await holder(channelId), token, 'still held by the keeper, never asked for');
      } finally {
        keeper.child.kill('SIGKILL');
        await exited(keeper.child);
      }
    });

    /**
     * The call whose paid row could not be written: when it had been forwarded already (the write
     * answered after the signature's check), on record unpaid, failed `internal`; else no row.
     */
    const unpaidRecord = async (agentId: string, rowsBefore: number, callsBefore: number) => {
      if (upstreamCalls === callsBefore) {
        assert.equal(await agentRows(agentId), rowsBefore, 'not forwarded: no row of it');
        return;
      }
      await waitFor(async () => (await agentRows(agentId)) === rowsBefore + 1, {
        timeoutMs: 5_000,
        what: 'the forwarded call on record',
      });
      const rows = await stack()
        .orm.em.getConnection()
        .execute<Array<Record<string, string | null>>>(
          `select status, error_class, payment_nonce, payment_channel, payment_amount from invocations
            where agent_id = ? and error_class = 'internal'`,
          [agentId],
        );
      assert.deepEqual(rows, [
        { status: 'failed', error_class: 'internal', payment_nonce: null, payment_channel: null, payment_amount: null },
      ]);
    };

    it('a held call whose row cannot be written is answered 503 with nothing charged (on record unpaid), and the same payment then buys the call', async () => {
      const { agentId, pay, channelId } = await openedChannel();
      const sql = stack().orm.em.getConnection();
      const first = await paidStream(pay, agentId);
      assert.equal(first.status, 200, first.text);
      assert.notEqual(await holder(channelId), null, 'held');
      // The database refuses this agent's payment bindings for a while (a trigger: a real
      // refusal, as a full disk or a lost constraint would give).
      const fn = `refuse_${agentId.replace(/\W/g, '_')}`;
      await sql.execute(`create function ${fn}() returns trigger language plpgsql as $$
        begin if new.agent_id = '${agentId}' then raise exception 'refused for the test'; end if; return new; end $$`);
      await sql.execute(`create trigger ${fn} before insert on payment_claims for each row execute function ${fn}()`);
      const rowsBefore = await agentRows(agentId);
      const callsBefore = upstreamCalls;
      let refused;
      try {
        refused = await paidStream(pay, agentId);
      } finally {
        await sql.execute(`drop trigger ${fn} on payment_claims`);
        await sql.execute(`drop function ${fn}()`);
      }
      assert.equal(refused.status, 503, refused.text);
      await unpaidRecord(agentId, rowsBefore, callsBefore);
      await waitForRow(first.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(2n * CEILING), 'nothing charged for it');
      // The payer's next voucher (the same ceiling: it was never charged) is served at once.
      const again = await paidStream(pay, agentId);
      assert.equal(again.status, 200, again.text);
      await waitForRow(again.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING));
    });

    it('a holder whose lease became another’s while it still trusted it writes no payment and answers nothing (503); the hold ends and the next call leases anew', async () => {
      const { agentId, pay, channelId } = await openedChannel();
      const sql = stack().orm.em.getConnection();
      const first = await paidStream(pay, agentId);
      assert.equal(first.status, 200, first.text);
      await waitForRow(first.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      const token = await holder(channelId);
      assert.ok(token, 'held');
      // As if this process had been paused past its lease and another call had taken it since
      // (and, here, let it go): the process's own view of its hold is still within its trust.
      await sql.execute(`update channels set busy_invocation = 'another-call', busy_until = now() where id = ?`, [
        channelId,
      ]);
      const rowsBefore = await agentRows(agentId);
      const callsBefore = upstreamCalls;
      const fenced = await paidStream(pay, agentId);
      assert.equal(fenced.status, 503, fenced.text);
      await unpaidRecord(agentId, rowsBefore, callsBefore);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(2n * CEILING), 'nothing charged for it');
      // The hold ended: the payer's same voucher takes the channel's lease anew and is served.
      const again = await paidStream(pay, agentId);
      assert.equal(again.status, 200, again.text);
      await waitForRow(again.id!, (r) => r.paymentSettlement === 'settled', 15_000);
      assert.equal((await channelRow(channelId)).charged_cumulative, String(3n * CEILING));
      const now = await holder(channelId);
      assert.ok(now && now !== token && now !== 'another-call', 'a new hold');
    });

    it("a public agent's channel, paid by an anonymous payer: one deposit, then vouchers served on the held channel", async () => {
      const agentId = await channelAgent(newPayTo(), paying.token, { public: true });
      const payer = await newWallet({ eth: true, usdc: 1_000_000n }, paying.provider);
      const before = await balanceOf(paying.provider, payer.address);
      const { fetch: pay } = channelClient(payer);
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        // No token: the payment is the caller's only credential.
        const res = await pay(`${stack().apiUrl}/public/agents/${agentId}/stream`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        assert.equal(res.status, 200, await res.text());
        ids.push(res.headers.get('x-gateway-invocation-id')!);
      }
      for (const id of ids) await waitForRow(id, (r) => r.paymentSettlement === 'settled', 15_000);
      const channelId = (await invocationRow(ids[0]!))!.paymentChannel!;
      assert.equal((await channelRow(channelId)).charged_cumulative, String(4n * CEILING));
      assert.equal(await balanceOf(paying.provider, payer.address), before - MIN_DEPOSIT, 'one deposit');
      assert.match(String(await holder(channelId)), /^hold-/, 'held between the calls');
    });
  });
});
