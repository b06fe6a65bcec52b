// The analytics rollups are folded from the invocation rows in batches (gateway/analytics/fold.ts,
// migration Migration20261206160000_analytics_fold); analytics_rebuild() recomputes them from the
// rows, so after any workload the two must agree exactly. Held to that: rows changing in every
// way the rollups care about (late completions, a lost stream completed after all, a charge found
// uncollected after it was folded, a released payment, a row no longer terminal), folded by
// several rounds at once as several replicas would, a round that dies midway, rows deleted, a
// database restored from another server; and
// a mixed workload through the real API (transactional and streamed calls, upstream failures, a
// late completion, a stream the stale-stream sweep fails as gateway_lost after its process died,
// metered calls charged after their answer, one of them not collected). The fold's lag is on
// /metrics; the revenue and uncollected charges are in the /v1/analytics answer.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Wallet, type JsonRpcProvider } from 'ethers';
import pg from 'pg';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { analyticsCaughtUp } from '../support/analytics.ts';
import { foldRound } from '../../gateway/analytics/fold.ts';
import { call, waitForInvocation } from '../support/http.ts';
import { createAgent, invocationRow, waitForRow } from '../support/proxy-helpers.ts';
import { startUpstream, type Received, type TestUpstream } from '../support/upstream.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited } from '../support/worker-process.ts';
import { waitFor } from '../support/wait.ts';
import { withPayingTenant } from '../support/settling.ts';
import { settledInvocation, uptoFetch, uptoPayer } from '../support/upto.ts';
import { newPayTo } from '../support/x402.ts';
import { tokenContract } from '../../scripts/dev/chain.ts';
import { failStaleStreams } from '../../gateway/invocations/stale-streams.ts';
import { newId } from '../../lib/ids.ts';

const conn = () => stack().orm.em.getConnection();

/** A tenant's hourly rollups, every figure the fold maintains. */
async function rollups(tenant: string): Promise<unknown[]> {
  return conn().execute(
    `select agent_id, bucket_start, count, errors, by_error_class, latency, ttft, paid, revenue::text as revenue,
            uncollected, uncollected_amount
       from analytics_hourly where tenant_id = ? order by bucket_start, agent_id`,
    [tenant],
  );
}

/** The folded rollups equal what a rebuild from the rows gives; answers them. */
async function assertFoldedAsRebuilt(tenant: string): Promise<unknown[]> {
  await analyticsCaughtUp();
  const folded = await rollups(tenant);
  await conn().execute(`select analytics_rebuild(?)`, [tenant]);
  assert.deepEqual(folded, await rollups(tenant), 'the folded rollups are what a rebuild gives');
  return folded;
}

/** Several replicas' rounds at once, each waiting for the others: none counts a row twice. */
const concurrentRounds = (n: number) => Promise.all(Array.from({ length: n }, () => foldRound(stack().orm, true)));

describe('analytics fold: the rollups equal a rebuild from the rows', function () {
  this.timeout(120_000);

  describe('rows changing in every way the rollups read', () => {
    const tenant = `fold-rows-${randomUUID()}`;
    const agents = [newId('agt'), newId('agt')];
    const hour = (h: number, minute = 5) => new Date(Date.UTC(2026, 9, 10, h, minute)).toISOString();

    async function insert(
      rows: Array<{
        id: string;
        agent?: number;
        at: string;
        status: string;
        latency?: number;
        amount?: string;
        attempts?: number;
      }>,
    ): Promise<void> {
      for (const r of rows)
        await conn().execute(
          `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, latency_ms, ttft_ms, payment_amount, attempts, created_at)
           values (?, ?, ?, 'streaming', ?, 'req', 'user', ?, ?, ?, ?, ?::timestamptz)`,
          [
            r.id,
            tenant,
            agents[r.agent ?? 0],
            r.status,
            r.latency ?? null,
            r.latency === undefined ? null : 1,
            r.amount ?? null,
            r.attempts ?? 1,
            r.at,
          ],
        );
    }
    const update = (set: string, id: string) => conn().execute(`update invocations set ${set} where id = ?`, [id]);

    it('after completions, late completions, corrections, concurrent rounds, a round that died, deletions and a restore', async () => {
      const ids = Array.from({ length: 12 }, () => newId('inv'));
      await insert([
        { id: ids[0], at: hour(1), status: 'succeeded', latency: 40 },
        { id: ids[1], at: hour(1), status: 'succeeded', latency: 4000, amount: '700' },
        { id: ids[2], agent: 1, at: hour(1), status: 'running' },
        { id: ids[3], at: hour(2), status: 'running', amount: '0' },
        { id: ids[4], at: hour(2), status: 'failed', amount: '900', attempts: 0 },
        { id: ids[5], agent: 1, at: hour(3), status: 'succeeded', latency: 12, amount: '50' },
      ]);
      await concurrentRounds(3);
      const first = await rollups(tenant);
      assert.equal(first.length, 3, 'the terminal rows of three agent-hours');

      // Late completions into hours already folded; a row the sweep failed; a charge found uncollected.
      await update(`status = 'succeeded', latency_ms = 250, completed_at = now()`, ids[2]);
      await update(
        `status = 'failed', error_class = 'gateway_lost', payment_amount = '300', completed_at = now()`,
        ids[3],
      );
      await update(`payment_settlement = 'failed', payment_settle_error = 'payer_balance_short'`, ids[1]);
      await Promise.all([concurrentRounds(4), insert([{ id: ids[6], at: hour(4), status: 'succeeded', latency: 9 }])]);
      await assertFoldedAsRebuilt(tenant);

      // The lost stream completed after all, with its whole charge; a settled charge changes nothing.
      await update(`status = 'succeeded', error_class = null, latency_ms = 77, payment_amount = '1300'`, ids[3]);
      await update(`payment_settlement = 'settled'`, ids[5]);
      await update(`payment_settlement = 'unconfigured'`, ids[3]);
      // Changed twice between rounds (only the last version counts), and a row no longer terminal.
      await insert([{ id: ids[7], at: hour(1), status: 'succeeded', latency: 5 }]);
      await update(`status = 'failed', error_class = 'timeout'`, ids[7]);
      await update(`status = 'running'`, ids[6]);
      await concurrentRounds(2);
      const folded = await assertFoldedAsRebuilt(tenant);
      const at = (h: number, agent = 0) =>
        folded.find(
          (r: any) => r.agent_id === agents[agent] && new Date(r.bucket_start).toISOString() === hour(h, 0),
        ) as any;
      assert.equal(at(4), undefined, 'an hour whose only row is no longer terminal has no group');
      assert.deepEqual(
        [
          Number(at(2).count),
          Number(at(2).errors),
          Number(at(2).paid),
          at(2).revenue,
          at(2).uncollected,
          at(2).uncollected_amount,
        ],
        [2, 1, 1, '1300', { unconfigured: 1 }, { unconfigured: '1300' }],
        'the lost row counted as completed with its whole charge; the released payment (attempts 0) not counted',
      );
      assert.deepEqual(at(1).uncollected_amount, { payer_balance_short: '700' });
      assert.deepEqual(at(1).by_error_class, { timeout: 1 });
      const [{ n }] = await conn().execute(`select count(*)::int as n from analytics_corrections`);
      assert.equal(n, 0, 'corrections are consumed by the round that applies them');

      // A round that dies midway (its transaction never commits) folds nothing; the next one does it all.
      // It takes the fold's lock before the row is written, so a background round cannot fold the
      // row first (it waits for the dying round, then finds the row unfolded).
      const dying = new pg.Client({ connectionString: stack().config.databaseUrl });
      await dying.connect();
      try {
        await dying.query('begin');
        await dying.query(`select pg_advisory_xact_lock(hashtext('analytics_fold'))`);
        await insert([{ id: ids[8], at: hour(5), status: 'succeeded', latency: 30, amount: '10' }]);
        assert.equal(Number((await dying.query('select analytics_fold(true) as n')).rows[0].n) >= 1, true);
        await dying.query('rollback');
      } finally {
        await dying.end();
      }
      await assertFoldedAsRebuilt(tenant);

      // Deleting rows leaves the rollups' history as it was.
      const before = await rollups(tenant);
      await conn().execute(`delete from invocations where id = ?`, [ids[0]]);
      await analyticsCaughtUp();
      assert.deepEqual(await rollups(tenant), before);

      // A database restored from a dump on another server: its stamps and the fold's snapshot are
      // ahead of this server's transactions. Rounds refuse (visibly) until a rebuild starts over;
      // then the restored rows are not folded again.
      // Written under the fold's lock: a background round already under way would otherwise move
      // the fold's snapshot on after this, over the restored one.
      const restoring = new pg.Client({ connectionString: stack().config.databaseUrl });
      await restoring.connect();
      try {
        await restoring.query('begin');
        await restoring.query(`select pg_advisory_xact_lock(hashtext('analytics_fold'))`);
        await restoring.query(`update invocations set analytics_xid = '4000000000'::xid8 where id = $1`, [ids[5]]);
        await restoring.query(`update analytics_fold_state set snap = '4000000001:4000000001:'`);
        await restoring.query('commit');
      } finally {
        await restoring.end();
      }
      await assert.rejects(foldRound(stack().orm, true), /restored from another server/);
      await conn().execute(`select analytics_rebuild()`);
      const restored = await rollups(tenant);
      await insert([{ id: ids[9], at: hour(6), status: 'succeeded', latency: 3 }]);
      await concurrentRounds(2);
      assert.deepEqual((await rollups(tenant)).slice(0, -1), restored, 'the restored rows are not folded again');
      await assertFoldedAsRebuilt(tenant);
    });
  });

  describe('a mixed workload through the API', () => {
    let upstream: TestUpstream;
    let token: string;
    let tenant: string;
    let provider: JsonRpcProvider;
    withPayingTenant('fold', (paying) => {
      token = paying.token;
      tenant = paying.tenant;
      provider = paying.provider;
    });
    type Answer = (req: Received, res: ServerResponse) => void | Promise<void>;
    const answers = new Map<string, Answer>();
    before(async () => {
      upstream = await startUpstream(async (req, res) => {
        const answer = answers.get(String(req.headers['x-answer']));
        if (answer) return answer(req, res);
        res.writeHead(req.body.toString() === 'fail' ? 500 : 200, { 'x-usage-cost': '1234' });
        res.end('ok');
      });
    });
    after(() => upstream?.close());

    const since = new Date(Date.now() - 3600_000).toISOString();
    const analytics = async (bucket: string) => {
      const res = await call('GET', `/v1/analytics?since=${since}&bucket=${bucket}`, {
        token: await stack().token(tenant, `reader-${randomUUID()}`),
      });
      assert.equal(res.status, 200, res.text);
      return res.json.groups as any[];
    };
    const headers = (answer?: string) => ({
      authorization: `Bearer ${token}`,
      ...(answer ? { 'x-answer': answer } : {}),
    });

    it('equals a rebuild; revenue is the charges of the paid calls, and what was not collected, by reason', async () => {
      const plain = await createAgent(token, { upstream_url: upstream.url });
      const metered = await createAgent(token, {
        upstream_url: upstream.url,
        pricing: {
          scheme: 'upto',
          amount: '50000',
          asset: 'USDC',
          network: 'base',
          pay_to: newPayTo(),
          meter: { kind: 'header', header: 'X-Usage-Cost' },
        },
      });
      // Several replicas folding all along.
      let working = true;
      const replicas = (async () => {
        while (working) await concurrentRounds(3);
      })();

      try {
        // Transactional and streamed calls, some failing upstream.
        for (const body of ['a', 'fail']) {
          const res = await call('POST', `/v1/proxy/${plain}`, { token, body });
          await waitForInvocation(token, plain, res.json.invocation_id);
          const streamed = await request(`${stack().apiUrl}/v1/proxy/${plain}/stream`, {
            method: 'POST',
            headers: headers(),
            body,
          });
          await streamed.body.text();
        }

        // A late completion: a stream still running across rounds, completed afterwards.
        let release = () => undefined as void;
        const released = new Promise<void>((r) => (release = r));
        const late = randomUUID();
        answers.set(late, async (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/plain' });
          res.write('first\n');
          await released;
          res.end('last\n');
        });
        const held = await request(`${stack().apiUrl}/v1/proxy/${plain}/stream`, {
          method: 'POST',
          headers: headers(late),
          body: 'x',
        });
        const heldId = String(held.headers['x-gateway-invocation-id']);
        await waitForRow(heldId, (r) => r.status === 'running');
        await analyticsCaughtUp();
        release();
        await held.body.text();
        await waitForRow(heldId);

        // A stream whose API process died mid-call: the stale-stream sweep fails it gateway_lost.
        const api = await startApiProcess();
        try {
          const lost = randomUUID();
          answers.set(lost, (_req, res) => {
            res.writeHead(200, { 'content-type': 'text/plain' });
            res.write('first\n');
          });
          const dying = await request(`${api.url}/v1/proxy/${plain}/stream`, {
            method: 'POST',
            headers: headers(lost),
            body: 'x',
          });
          dying.body.on('error', () => undefined);
          const lostId = String(dying.headers['x-gateway-invocation-id']);
          await waitForRow(lostId, (r) => r.status === 'running');
          api.child.kill('SIGKILL');
          await exited(api.child);
          // PostgreSQL notices the dead session (its owner lock goes with it) as the socket closes;
          // until then a sweep may fail other tests' stale rows, not this one.
          const swept = await waitFor(
            async () => {
              await failStaleStreams(stack().orm);
              const row = await invocationRow(lostId);
              return row?.status === 'failed' && row;
            },
            { everyMs: 100, what: 'the stale stream to be failed' },
          );
          assert.equal(swept.errorClass, 'gateway_lost');
        } finally {
          api.child.kill('SIGKILL');
        }

        // Metered calls charged after their answer: one streamed, one transactional, and one whose
        // payer emptied its wallet before the charge (not collected: payer_balance_short).
        const payer = await uptoPayer(provider, 10_000_000n);
        const pay = uptoFetch(payer);
        const paid = async (path: string, answer?: string) => {
          const res = await pay(`${stack().apiUrl}/v1/proxy/${metered}${path}`, {
            method: 'POST',
            headers: headers(answer),
            body: '{}',
          });
          await res.arrayBuffer();
          return settledInvocation(token, metered, String(res.headers.get('x-gateway-invocation-id')));
        };
        assert.equal((await paid('/stream')).payment_settlement, 'settled');
        assert.equal((await paid('')).payment_settlement, 'settled');
        const drained = randomUUID();
        const broke = await uptoPayer(provider, 10_000_000n);
        answers.set(drained, async (_req, res) => {
          const usdc = tokenContract(stack().infra.tokenAddress, broke);
          await (await usdc.transfer(Wallet.createRandom().address, await usdc.balanceOf(broke.address))).wait();
          res.writeHead(200, { 'x-usage-cost': '500' });
          res.end('{}');
        });
        const unpaid = await (async () => {
          const res = await uptoFetch(broke)(`${stack().apiUrl}/v1/proxy/${metered}`, {
            method: 'POST',
            headers: headers(drained),
            body: '{}',
          });
          await res.arrayBuffer();
          return settledInvocation(token, metered, String(res.headers.get('x-gateway-invocation-id')));
        })();
        assert.deepEqual([unpaid.payment_settlement, unpaid.payment_settle_error], ['failed', 'payer_balance_short']);
      } finally {
        working = false;
        await replicas;
      }

      // Read as folded (the hours' summaries not current yet: the groups written by the API), then
      // after a rebuild (written by the query): the same answers.
      await analyticsCaughtUp();
      const asFolded = { hour: await analytics('hour'), day: await analytics('day') };
      await assertFoldedAsRebuilt(tenant);
      assert.deepEqual(await analytics('hour'), asFolded.hour);
      assert.deepEqual(await analytics('day'), asFolded.day);
      for (const bucket of ['hour', 'day']) {
        const groups = await analytics(bucket);
        const of = (agent: string) => groups.filter((g) => g.agent_id === agent);
        const sum = (list: any[], f: (g: any) => number) => list.reduce((s, g) => s + f(g), 0);
        assert.equal(
          sum(of(plain), (g) => g.count),
          6,
          `${bucket}: every call of the plain agent`,
        );
        assert.equal(
          sum(of(plain), (g) => g.by_error_class.upstream_5xx ?? 0),
          2,
        );
        assert.equal(
          sum(of(plain), (g) => g.by_error_class.gateway_lost ?? 0),
          1,
        );
        assert.equal(
          sum(of(plain), (g) => g.revenue.count),
          0,
          'no paid call',
        );
        const revenue = of(metered).reduce(
          (r, g) => ({
            count: r.count + g.revenue.count,
            amount: r.amount + BigInt(g.revenue.amount),
            lost: r.lost + BigInt(g.revenue.uncollected.amount),
            reasons: { ...r.reasons, ...g.revenue.uncollected.by_reason },
          }),
          { count: 0, amount: 0n, lost: 0n, reasons: {} },
        );
        assert.deepEqual(revenue, {
          count: 3,
          amount: 1234n + 1234n + 500n,
          lost: 500n,
          reasons: { payer_balance_short: { count: 1, amount: '500' } },
        });
      }
    });
  });

  it('shows its lag on /metrics, bounded by a round', async () => {
    await analyticsCaughtUp();
    const text = await (await fetch(stack().metricsUrl)).text();
    const line = text.split('\n').find((l) => l.startsWith('gateway_analytics_fold_lag_seconds '));
    assert.ok(line, 'gateway_analytics_fold_lag_seconds is exported');
    const lag = Number(line.split(' ')[1]);
    assert.ok(lag >= 0 && lag < 5, `lag ${lag} s, within the 5 s the rollups may lag the rows`);
    assert.match(text, /^gateway_analytics_folded_rows_total \d+/m);
  });
});
