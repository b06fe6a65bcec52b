// Budgets across replicas (docs/API.md "Budgets"): two API processes (`node api/main.ts`) on the
// run's one Redis, PostgreSQL and Temporal. A hard budget of 10 calls a day on an agent admits
// exactly 10 of 50 calls sent at once, spread over both replicas, and refuses the other 40 with
// its id (the reservation is one Lua step in Redis, shared). A replica SIGKILLed while it holds a
// reservation (a paid call whose settlement answer is held by a relay) does not leave the budget
// short: the other replica's reconciliation gives the reservation back once the dead one's
// liveness key expires (the call never got a row), and the same payment header then buys the
// call it paid for through the survivor, settled once and counted once. The door's one script
// (the rate limit's take and the reservation together) keeps the limiter's and the budget's
// refusals apart: a call the limiter refuses reserves nothing.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName, type Reply } from '../support/http.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited, stopWorkerProcess } from '../support/worker-process.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startHoldingFacilitator, type HoldingFacilitator } from '../support/holding-facilitator.ts';
import {
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';
import { createRedisLedger } from '../../gateway/budgets/redis-ledger.ts';
import { createRedisLimiter } from '../../gateway/ratelimit/redis.ts';
import type { Claim } from '../../gateway/budgets/ledger.ts';

type Api = { child: ChildProcess; url: string };

describe('budgets across two API replicas on one Redis', function () {
  this.timeout(180_000);
  const children: ChildProcess[] = [];
  let apis: Api[];
  let upstream: TestUpstream;

  before(async function () {
    this.timeout(120_000);
    upstream = await startUpstream();
    const env = { REDIS_URL: stack().redisUrl };
    const started = await Promise.allSettled([startApiProcess(env), startApiProcess(env)]);
    for (const s of started) if (s.status === 'fulfilled') children.push(s.value.child);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    apis = started.map((s) => (s as PromiseFulfilledResult<Api>).value);
  });
  after(async function () {
    this.timeout(60_000);
    await Promise.all(children.map((child) => stopWorkerProcess(child)));
    await upstream?.close();
  });

  it('a hard budget of 10 calls admits exactly 10 of 50 concurrent calls over both replicas and refuses 40 naming it', async () => {
    const token = await stack().token(`tenant-budget-replicas-${randomUUID()}`);
    const agent = await callAt(apis[0].url, 'POST', '/v1/agents', {
      token,
      json: { name: uniqueName('capped'), upstream_url: upstream.url, rate_limit_rps: 1000, rate_limit_burst: 1000 },
    });
    assert.equal(agent.status, 201, agent.text);
    const budget = await callAt(apis[0].url, 'POST', '/v1/budgets', {
      token,
      json: {
        name: uniqueName('ten'),
        scope: { agent_id: agent.json.id },
        limit: { calls: 10 },
        window: 'day',
        mode: 'hard',
      },
    });
    assert.equal(budget.status, 201, budget.text);

    const answers: Array<Reply & { replica: number }> = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const replica = i % 2;
        const path = `/v1/proxy/${agent.json.id}${i % 4 < 2 ? '/stream' : ''}`;
        const res = await callAt(apis[replica].url, 'POST', path, { token, body: `call ${i}` });
        return { ...res, replica };
      }),
    );
    const admitted = answers.filter((a) => a.status === 200 || a.status === 202);
    const refused = answers.filter((a) => a.status === 429);
    assert.equal(admitted.length, 10, answers.map((a) => a.status).join(' '));
    assert.equal(refused.length, 40);
    for (const r of refused) assert.deepEqual(r.json, { error: 'budget exceeded', budget_id: budget.json.id });
    assert.deepEqual(
      [0, 1].map((replica) => refused.some((r) => r.replica === replica)),
      [true, true],
      'both replicas refused',
    );
    // Both replicas read the same window: 10 used, none left.
    for (const api of apis) {
      const shown = await callAt(api.url, 'GET', `/v1/budgets/${budget.json.id}`, { token });
      assert.deepEqual(shown.json.used, { amount: '0', calls: 10 });
      assert.deepEqual(shown.json.remaining, { amount: null, calls: 0 });
    }
    await waitFor(() => upstream.received.filter((r) => r.body.toString().startsWith('call ')).length >= 10, {
      what: 'the admitted calls at the upstream',
    });
  });

  it("the Redis ledger's steps: all or nothing, trued up to the charge, given back once, each threshold queued once", async () => {
    const ledger = createRedisLedger(stack().redisUrl, { prefix: `test-${randomUUID()}:` });
    try {
      const amount: Claim = {
        budgetId: 'bud_a',
        windowStartMs: 1000,
        limitAmount: 1000n,
        limitCalls: null,
        hard: true,
        thresholds: [0.5, 1],
        keepMs: 60_000,
      };
      const calls: Claim = { ...amount, budgetId: 'bud_b', limitAmount: null, limitCalls: 100, thresholds: [] };
      const reserve = (id: string, value: bigint) =>
        ledger.reserve([amount, calls], { invocationId: id, amount: value, calls: 1 }, 'o', 0);
      assert.deepEqual(await reserve('upto', 600n), { admitted: true });
      assert.deepEqual(await reserve('more', 500n), { admitted: false, refusing: [0] });
      assert.deepEqual(await ledger.usage([amount, calls]), [
        { amount: 600n, calls: 1 },
        { amount: 600n, calls: 1 },
      ]);
      assert.deepEqual(
        (await ledger.due(Date.now(), Date.now() + 10_000, 10)).map((d) => [d.invocationId, d.owner]),
        [['upto', 'o']],
      );
      await ledger.settleAll([{ invocationId: 'upto', counted: { amount: 50n, calls: 1 } }]);
      assert.equal(await ledger.settle('upto', { amount: 50n, calls: 1 }), false, 'settled once');
      assert.deepEqual(await ledger.usage([amount]), [{ amount: 50n, calls: 1 }]);
      assert.deepEqual(await reserve('released', 950n), { admitted: true });
      assert.equal(await ledger.settle('released', { amount: 0n, calls: 0 }), true);
      assert.deepEqual(await ledger.usage([amount, calls]), [
        { amount: 50n, calls: 1 },
        { amount: 50n, calls: 1 },
      ]);
      assert.deepEqual(await reserve('last', 950n), { admitted: true });
      // 600 crossed 0.5; 1000 crossed 1; the release and the re-crossing of 0.5 queued nothing more.
      assert.deepEqual(
        (await ledger.alerts(10)).map((a) => [a.budgetId, a.windowStartMs, a.threshold]),
        [
          ['bud_a', 1000, 0.5],
          ['bud_a', 1000, 1],
        ],
      );
      assert.deepEqual(await ledger.due(Date.now(), Date.now(), 10).then((d) => d.map((x) => x.invocationId)), [
        'last',
      ]);
    } finally {
      await ledger.close();
    }
  });

  it("the door's one script: a call the rate limiter refuses reserves nothing; one a budget refuses keeps its token", async () => {
    const prefix = `test-${randomUUID()}:`;
    const ledger = createRedisLedger(stack().redisUrl, { prefix });
    const limiter = createRedisLimiter(stack().redisUrl, { prefix: `${prefix}rl:` });
    try {
      const claim: Claim = {
        budgetId: 'bud_door',
        windowStartMs: 1000,
        limitAmount: null,
        limitCalls: 1,
        hard: true,
        thresholds: [],
        keepMs: 60_000,
      };
      // Two tokens, refilled once in a thousand seconds.
      const take = { limiter, buckets: [{ key: 'agent:door', rate: 0.001, burst: 2 }] };
      const step = (id: string) =>
        ledger.takeAndReserve(take, [claim], { invocationId: id, amount: 0n, calls: 1 }, 'o', Date.now());
      assert.deepEqual(await step('first'), { decision: { allowed: true }, reserved: { admitted: true } });
      assert.deepEqual(await step('second'), {
        decision: { allowed: true },
        reserved: { admitted: false, refusing: [0] },
      });
      assert.deepEqual(await ledger.usage([claim]), [{ amount: 0n, calls: 1 }]);
      // The budget's refusal took the second token: the third call is the limiter's to refuse.
      const third = await step('third');
      assert.equal(third.decision.allowed, false);
      assert.equal(third.reserved, null);
      assert.equal(await ledger.settle('first', { amount: 0n, calls: 0 }), true);
      const fourth = await step('fourth');
      assert.equal(fourth.decision.allowed, false);
      assert.equal(fourth.reserved, null);
      assert.deepEqual(
        await ledger.usage([claim]),
        [{ amount: 0n, calls: 0 }],
        'refused by the limiter: nothing reserved',
      );
      assert.deepEqual(
        (await ledger.due(Date.now(), Date.now(), 10)).map((d) => d.invocationId),
        [],
        'no reservation left behind',
      );
    } finally {
      await Promise.all([ledger.close(), limiter.close()]);
    }
  });

  describe('a replica that dies holding a reservation', () => {
    const PRICE = 4_000n;
    let provider: ReturnType<typeof chainProvider>;
    let account: TestAccount;
    let relay: HoldingFacilitator;
    before(async () => {
      provider = chainProvider();
      account = await newAccount(`budget-crash-${randomUUID()}`);
      relay = await startHoldingFacilitator({
        facilitatorUrl: stack().facilitator.url,
        pki: stack().infra.pki.files,
        account: account.cert,
      });
    });
    after(async () => {
      await relay?.close();
      await account?.client.close();
      provider?.destroy();
    });

    it('does not leave the budget short: the survivor gives the reservation back, and the same header buys the call', async () => {
      const [survivor, doomed] = apis;
      const token = await stack().token(`tenant-budget-crash-${randomUUID()}`);
      const credential = await callAt(survivor.url, 'POST', '/v1/credentials', {
        token,
        json: {
          name: 'facilitator-client',
          auth_type: 'none',
          source: 'managed',
          plaintext: `${account.cert.certPem}\n${account.cert.keyPem}`,
        },
      });
      assert.equal(credential.status, 201, credential.text);
      const settleThrough = async (url: string) => {
        const res = await callAt(survivor.url, 'PUT', '/v1/settlement/config', {
          token,
          json: { facilitator_url: url, facilitator_credential_ref: credential.json.id },
        });
        assert.ok(res.status === 200 || res.status === 201, res.text);
      };
      await settleThrough(relay.url);
      const payTo = newPayTo();
      const agent = await callAt(survivor.url, 'POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('crash'),
          upstream_url: upstream.url,
          pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
        },
      });
      assert.equal(agent.status, 201, agent.text);
      const budget = await callAt(survivor.url, 'POST', '/v1/budgets', {
        token,
        json: {
          name: uniqueName('one'),
          scope: { agent_id: agent.json.id },
          limit: { calls: 1 },
          window: 'day',
          mode: 'hard',
        },
      });
      assert.equal(budget.status, 201, budget.text);
      const used = async () =>
        (await callAt(survivor.url, 'GET', `/v1/budgets/${budget.json.id}`, { token })).json.used as {
          amount: string;
          calls: number;
        };

      const payer = await newPayer(100_000n);
      const header = encodePayment(
        await signPayment(payer, { payTo, value: PRICE, validBefore: Math.floor(Date.now() / 1000) + 600 }),
      );
      const send = (api: Api, paymentHeader: string) =>
        callAt(api.url, 'POST', `/v1/proxy/${agent.json.id}`, {
          token,
          body: 'crash',
          headers: { 'content-type': 'text/plain', 'x-payment': paymentHeader },
        });
      const lost = send(doomed, header).catch(() => null);
      const settled = await relay.held;
      assert.equal(settled.json.success, true, JSON.stringify(settled.json));
      doomed.child.kill('SIGKILL');
      await exited(doomed.child);
      assert.equal(await lost, null, 'the caller got no answer');

      // The dead replica's reservation holds the budget's only call for now...
      assert.deepEqual(await used(), { amount: String(PRICE), calls: 1 });
      // ...and the survivor gives it back once the dead one's liveness has expired: it never got a row.
      await waitFor(async () => (await used()).calls === 0, {
        timeoutMs: 30_000,
        what: 'the dead replica’s reservation given back',
      });

      await settleThrough(stack().facilitator.url);
      const resumed = await send(survivor, header);
      assert.equal(resumed.status, 202, resumed.text);
      assert.deepEqual(await used(), { amount: String(PRICE), calls: 1 });
      const another = await newPayer(100_000n);
      const refused = await send(survivor, encodePayment(await signPayment(another, { payTo, value: PRICE })));
      assert.equal(refused.status, 429, refused.text);
      assert.equal(refused.json.budget_id, budget.json.id);
      assert.deepEqual(
        await transfersTo(provider, payTo),
        [{ hash: settled.json.transaction, value: PRICE }],
        'one transfer: the crashed call’s, which the resumed call reused',
      );
      assert.equal(await balanceOf(provider, another.address), 100_000n, 'the refused payer was not charged');
      await waitFor(() => upstream.received.some((r) => r.body.toString() === 'crash'), {
        what: 'the resumed call served',
      });
      // Once its row is complete the reservation is trued up to it: one call, its price.
      await waitFor(
        async () => {
          const [row] = await stack()
            .orm.em.getConnection()
            .execute<Array<{ n: string }>>(
              `select count(*) as n from invocations where id = ? and status = 'succeeded'`,
              [resumed.json.invocation_id],
            );
          return Number(row.n) === 1;
        },
        { what: 'the resumed call succeeded' },
      );
      assert.deepEqual(await used(), { amount: String(PRICE), calls: 1 });
    });
  });
});
