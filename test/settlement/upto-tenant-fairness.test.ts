// Metered charges are fair between tenants. Tenant A has many charges due against a facilitator
// that is slow for it (it holds every settle open: test/support/stalling-facilitator.ts); tenant
// B's charge, settled through the real facilitator meanwhile, is not delayed by them: the worker
// lets one tenant have at most CHARGE_TENANT_CONCURRENCY settles in flight (gateway/payment/charges.ts),
// so A's backlog holds that many of its activity slots, not all 100 of them with B's settle
// queued behind. And the due-charges round leases a fair share per tenant: A's backlog older than
// B's charge does not keep B's out of a round.
//
// A's backlog is one real paid call of A's, then its row and payment binding copied in PostgreSQL
// (a backlog of 150 paid calls made through the API would take minutes and prove nothing more),
// their charge workflows started as the API starts them (temporal/charge-start.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import type { Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { payUptoChallenge, rpcReader, uptoPayer } from '../support/upto.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { balanceOf, newPayTo } from '../support/x402.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startStallingFacilitator, type StallingFacilitator } from '../support/stalling-facilitator.ts';
import { waitFor } from '../support/wait.ts';
import { call } from '../support/http.ts';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { startMeteredCharge } from '../../temporal/charge-start.ts';
import { leaseDueCharges } from '../../gateway/payment/charges-due.ts';

const MAX = 50_000n;
/** More than the worker's 100 activity slots: unbounded, A's settles alone would hold them all. */
const BACKLOG = 150;
/**
 * How long B's charge may take from its answer's end to settled. Alone it takes 0.4 to 1.2 s on
 * this machine, and 0.6 to 11.5 s beside A's backlog (2026-12-06, load average 16 to 19 on 2 cores);
 * without the per-tenant bound (CHARGE_TENANT_CONCURRENCY=1000 in the stack, tried by hand) it
 * did not settle within 12 s: it waits for A's held settles to time out (SETTLEMENT_TIMEOUT_MS,
 * 30 s), since A's 150 fill the worker's 100 slots.
 */
const B_BOUND_MS = 20_000;

describe('upto: charges are fair between tenants', function () {
  this.timeout(240_000);
  let a: PayingTenant;
  let b: PayingTenant;
  withPayingTenant('fair-a', (p) => (a = p));
  withPayingTenant('fair-b', (p) => (b = p));
  const execute = <T>(sql: string, params: unknown[] = []) =>
    stack().orm.em.getConnection().execute(sql, params) as Promise<T>;
  /** `?, ?, ...` for a list of parameters. */
  const list = (values: unknown[]) => values.map(() => '?').join(', ');
  // Streamed answers stating their charge in their head.
  let upstreams: { a: TestUpstream; b: TestUpstream };
  const charging = (cost: string) =>
    startUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-usage-cost': cost });
      res.end('data: {"done":true}\n\n');
    });
  before(async () => {
    upstreams = { a: await charging('1000'), b: await charging('2500') };
  });
  after(async () => {
    await upstreams?.a.close();
    await upstreams?.b.close();
  });

  async function meteredAgent(paying: PayingTenant, upstream: TestUpstream, payTo: string): Promise<string> {
    return createAgent(paying.token, {
      upstream_url: upstream.url,
      pricing: {
        scheme: 'upto',
        amount: String(MAX),
        asset: 'USDC',
        network: 'base',
        pay_to: payTo,
        meter: { kind: 'header', header: 'X-Usage-Cost' },
      },
    });
  }

  /** How long `paying`'s streamed metered call takes from its answer's end to its charge settled (asserted within B_BOUND_MS). */
  async function chargeTime(paying: PayingTenant, agentId: string, cost: bigint): Promise<number> {
    const payer = await uptoPayer(paying.provider, 10_000_000n);
    const before = await balanceOf(paying.provider, payer.address);
    const id = await streamedCall(paying, agentId, payer);
    const ended = Date.now();
    const settled = await waitForRow(
      id,
      (r) => r.paymentSettlement !== null && r.paymentSettlement !== 'settling',
      B_BOUND_MS,
    );
    const tookMs = Date.now() - ended;
    assert.equal(settled.paymentSettlement, 'settled', String(settled.paymentSettleError));
    assert.equal(await balanceOf(paying.provider, payer.address), before - cost);
    return tookMs;
  }

  /** A streamed metered call of `paying`'s agent, paid by the unmodified upto client; its invocation id once its answer ended. */
  async function streamedCall(paying: PayingTenant, agentId: string, payer: Wallet): Promise<string> {
    const url = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    const challenge = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${paying.token}` },
      body: '{}',
    });
    assert.equal(challenge.status, 402);
    const required = JSON.parse(Buffer.from(challenge.headers.get('payment-required')!, 'base64').toString('utf8'));
    const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
    const res = await request(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${paying.token}`, 'payment-signature': encodeBase64Json(wire) },
      body: '{}',
    });
    assert.equal(res.statusCode, 200);
    await res.body.text();
    return String(res.headers['x-gateway-invocation-id']);
  }

  it("a tenant's backlog against a slow facilitator does not delay another tenant's charge", async () => {
    const s = stack();
    const perTenant = s.config.payment.chargeTenantConcurrency;
    // A's facilitator holds every settle; the upstreams state a charge in their head.
    const stalling: StallingFacilitator = await startStallingFacilitator({
      facilitatorUrl: s.facilitator.url,
      pki: s.infra.pki.files,
      account: a.account.cert,
    });
    const cloned: string[] = [];
    try {
      const config = await call('GET', '/v1/settlement/config', { token: a.token });
      const put = await call('PUT', '/v1/settlement/config', {
        token: a.token,
        json: { facilitator_url: stalling.url, facilitator_credential_ref: config.json.facilitator_credential_ref },
      });
      assert.equal(put.status, 200, put.text);

      // B's charge alone first: the same run's baseline.
      const bAgent = await meteredAgent(b, upstreams.b, newPayTo());
      const aloneMs = await chargeTime(b, bAgent, 2500n);

      // A's backlog: one real call, its row and binding copied BACKLOG times, every charge started.
      const aAgent = await meteredAgent(a, upstreams.a, newPayTo());
      const aFirst = await streamedCall(a, aAgent, await uptoPayer(a.provider, 10_000_000n));
      await waitForRow(aFirst, (r) => r.status === 'succeeded' && r.paymentCharge === '1000');
      const copies = await execute<Array<{ id: string }>>(
        `with source as (select * from invocations where id = ?),
         copies as (
           insert into invocations
           select (jsonb_populate_record(null::invocations, to_jsonb(source) || jsonb_build_object(
                     'id', 'inv_fair_' || g || '_' || md5(random()::text), 'payment_settlement', null,
                     'charge_lease_until', null))).*
             from source, generate_series(1, ?) g
           returning id)
         insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status,
                                     invocation_id, signed_payment, created_at, updated_at)
         select 'pay_' || c.id, p.tenant_id, p.agent_id, p.network, p.asset, p.payer, p.nonce || '-' || c.id,
                p.amount, 'claimed', c.id, p.signed_payment, now(), now()
           from copies c, payment_claims p where p.invocation_id = ?
         returning invocation_id as id`,
        [aFirst, BACKLOG, aFirst],
      );
      assert.equal(copies.length, BACKLOG);
      cloned.push(...copies.map((c) => c.id));
      const agent = { id: aAgent, name: 'fair-a', emitReceipts: false };
      await Promise.all(
        cloned.map((invocationId) =>
          startMeteredCharge(
            s.temporal,
            s.config.temporal.taskQueue,
            { invocationId, tenantId: a.tenant, agent },
            10_000,
          ),
        ),
      );
      // A's settles reach its facilitator, and stay there.
      await waitFor(() => stalling.settles().open >= Math.min(perTenant, BACKLOG), {
        timeoutMs: 30_000,
        what: "A's settles held by its facilitator",
        state: () => JSON.stringify(stalling.settles()),
      });

      // The whole backlog is waiting on the task queue: the last charge started has scheduled its settle.
      const last = s.temporal.workflow.getHandle(`charge-${cloned[cloned.length - 1]}`);
      await waitFor(async () => ((await last.describe()).raw.pendingActivities?.length ?? 0) > 0, {
        timeoutMs: 60_000,
        everyMs: 250,
        what: "the last of A's charges to schedule its settle",
      });

      // B's charge, meanwhile, through the real facilitator.
      const tookMs = await chargeTime(b, bAgent, 2500n);

      // A's backlog was there all along, and took no more than its share of the worker.
      const [{ due }] = await execute<Array<{ due: number }>>(
        `select count(*)::int as due from invocations where id in (${list(cloned)}) and payment_settlement is distinct from 'settled'`,
        cloned,
      );
      assert.equal(due, BACKLOG, "none of A's charges settled");
      assert.ok(
        stalling.settles().most <= perTenant,
        `A had at most ${perTenant} settles in flight: ${JSON.stringify(stalling.settles())}`,
      );
      console.log(
        `      B's charge settled ${tookMs} ms after its answer beside A's ${BACKLOG} held charges (${aloneMs} ms alone)`,
      );
    } finally {
      await stalling.close();
      // A's charges are given up: recorded failed (no round starts them again), their workflows ended.
      await execute(
        `update invocations set payment_settlement = 'failed', payment_settle_error = 'settlement_unavailable'
          where tenant_id = ? and payment_scheme is not null and (payment_settlement is null or payment_settlement = 'settling')`,
        [a.tenant],
      );
      await Promise.all(
        cloned.map((id) =>
          s.temporal.workflow
            .getHandle(`charge-${id}`)
            .terminate('test over')
            .catch(() => undefined),
        ),
      );
    }
  });

  it("the due-charges round leases a fair share per tenant: A's older backlog leaves room for B's charge", async () => {
    // Rows as completed streamed calls leave them, their charge due; completed just now, so the
    // stack's own round (15 s) leaves them to this lease.
    const seed = (tenant: string, count: number, ageMs: number) =>
      execute<Array<{ id: string }>>(
        `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, attempts, request_headers,
                                  payment_scheme, payment_max_amount, payment_charge, created_at, updated_at, completed_at)
         select 'inv_due_' || g || '_' || md5(random()::text), ?, 'agent', 'streaming', 'succeeded', 'req', 'user', 1,
                '{}'::jsonb, 'upto',
                '100', '1', now(), now(), now() - make_interval(secs => (? - g) / 1000.0)
           from generate_series(1, ?) g
         returning id`,
        [tenant, ageMs, count],
      );
    const aTenant = `t-due-a-${randomUUID()}`;
    const bTenant = `t-due-b-${randomUUID()}`;
    const aRows = await seed(aTenant, 40, 3_000);
    const bRows = await seed(bTenant, 1, 1_000);
    const ids = [...aRows, ...bRows].map((r) => r.id);
    try {
      const leased = await leaseDueCharges(stack().orm, {
        leaseMs: 60_000,
        streamedAfterMs: 0,
        lostAfterMs: 0,
        transactionalAfterMs: 0,
        batch: 10,
        perTenant: 5,
      });
      const ours = leased.filter((c) => ids.includes(c.invocationId));
      assert.deepEqual(
        ours.filter((c) => c.tenantId === bTenant).map((c) => c.invocationId),
        [bRows[0].id],
        "B's newer charge is in the round",
      );
      const aLeased = ours.filter((c) => c.tenantId === aTenant).map((c) => c.invocationId);
      assert.equal(aLeased.length, 5, 'A gets its share, not the batch');
      // A's oldest first (the seed's first rows are the oldest).
      assert.deepEqual(
        aLeased.sort(),
        aRows
          .slice(0, 5)
          .map((r) => r.id)
          .sort(),
      );
    } finally {
      await execute(`update invocations set payment_settlement = 'failed' where id in (${list(ids)})`, ids);
    }
  });
});
