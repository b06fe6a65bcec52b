// A real API PROCESS killed mid-stream: its streaming row must not stay `running` forever (and
// must not be missing). Once the start row is written (at the end of the turn that admitted the
// call, gateway/invocations/row-session.ts) and the process is gone, its owner lock is free and the stale-stream
// sweep fails the row `gateway_lost`, while the rows of a live process are left alone. The
// sweep's verdict is a guess: a process that was alive after all (only its row connection
// broke) completes the row truthfully.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { createAgent, rawUpstream, waitForRow } from '../support/proxy-helpers.ts';
import { exited } from '../support/worker-process.ts';
import { startApiProcess } from '../support/api-process.ts';
import { waitFor } from '../support/wait.ts';
import { analyticsCaughtUp } from '../support/analytics.ts';
import { failStaleStreams } from '../../gateway/invocations/stale-streams.ts';

describe('proxy: an API process lost mid-stream', function () {
  this.timeout(60_000);

  it('leaves its streaming row failed (gateway_lost), neither running nor missing; a live process’s row is left alone', async () => {
    // The upstream sends its head and a first chunk, then holds the stream open.
    const up = await rawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first chunk\n');
    });
    const api = await startApiProcess();
    let live: ChildProcess | undefined;
    try {
      const token = await stack().token(`tenant-lost-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await request(`${api.url}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'x',
      });
      assert.equal(res.statusCode, 200);
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      const reader = res.body[Symbol.asyncIterator]();
      assert.match(String((await reader.next()).value), /first chunk/);
      res.body.on('error', () => undefined); // the connection breaks when the process dies

      // Another process, still alive, mid-stream too.
      const other = await startApiProcess();
      live = other.child;
      const res2 = await request(`${other.url}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'x',
      });
      const liveId = String(res2.headers['x-gateway-invocation-id']);
      res2.body.on('error', () => undefined);
      await res2.body[Symbol.asyncIterator]().next();
      assert.equal((await waitForRow(liveId, (r) => r.status === 'running')).status, 'running');

      // Mid-stream, the row is there and running.
      assert.equal((await waitForRow(invocationId, (r) => r.status === 'running')).status, 'running');
      api.child.kill('SIGKILL');
      await exited(api.child);

      // PostgreSQL notices the dead session (its owner lock goes with it) as the socket closes.
      await waitFor(() => failStaleStreams(stack().orm), { everyMs: 100, what: 'the stale stream to be failed' });
      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'failed');
      assert.equal(row.errorClass, 'gateway_lost');
      assert.ok(row.completedAt);
      assert.equal(
        (await waitForRow(liveId, (r) => r.status === 'running')).status,
        'running',
        'the live process’s row is not touched',
      );
    } finally {
      api.child.kill('SIGKILL');
      // The upstream first: the live process's stream ends with it, so its stop has no call in
      // hand to wait for (API_SHUTDOWN_GRACE_MS, 30 s).
      await up.close();
      live?.kill('SIGTERM');
      if (live) await exited(live);
    }
  });

  it('lets a live call complete a row the sweep failed as gateway_lost (its own completion is the truth)', async () => {
    let release: () => void = () => undefined;
    const released = new Promise<void>((r) => (release = r));
    const up = await rawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first chunk\n');
      void released.then(() => res.end('last chunk\n'));
    });
    try {
      const token = await stack().token(`tenant-lost-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: up.url });
      const res = await request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'x',
      });
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      await waitForRow(invocationId, (r) => r.status === 'running');
      // What a sweep does while this process's row connection is briefly broken.
      await stack()
        .orm.em.getConnection()
        .execute(
          `update invocations set status = 'failed', error_class = 'gateway_lost', completed_at = now() where id = ?`,
          [invocationId],
        );
      // The guess is folded in before the truth comes.
      await analyticsCaughtUp();
      const [guess] = await stack()
        .orm.em.getConnection()
        .execute(`select count, by_error_class from analytics_hourly where agent_id = ?`, [agentId]);
      assert.deepEqual([Number(guess.count), guess.by_error_class], [1, { gateway_lost: 1 }]);
      release();
      assert.match(await res.body.text(), /first chunk\nlast chunk/);
      const row = await waitForRow(invocationId, (r) => r.status === 'succeeded');
      assert.equal(row.upstreamStatus, 200);
      assert.equal(row.errorClass, null);
      // The fold took the guess back out: the rollup holds what a rebuild from the rows gives.
      await analyticsCaughtUp();
      const conn = stack().orm.em.getConnection();
      const rollup = () =>
        conn.execute(
          `select agent_id, bucket_start, count, errors, by_error_class, latency, ttft from analytics_hourly where tenant_id = ? order by bucket_start`,
          [row.tenantId],
        );
      const folded = await rollup();
      assert.equal(Number(folded[0].count), 1);
      assert.equal(Number(folded[0].errors), 0);
      await conn.execute(`select analytics_rebuild(?)`, [row.tenantId]);
      assert.deepEqual(await rollup(), folded);
    } finally {
      release();
      await up.close();
    }
  });
});
