// A gateway worker killed mid-invocation: a real worker process (temporal/gateway-worker-main.ts
// with the stack's settings, on a task queue of its own) is SIGKILLed while the upstream holds
// the request; a second worker process takes over once the activity's heartbeat times out.
// Each invocation completes exactly once: without the opt-in the request is not re-sent and
// the row fails as `interrupted`; with retry_non_idempotent it is re-sent and succeeds.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { createAgent, rawUpstream, readAll, startProxyApp, waitForRow } from '../support/proxy-helpers.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { waitFor } from '../support/wait.ts';

describe('a worker killed mid-invocation', function () {
  this.timeout(180_000);
  const children: ChildProcess[] = [];
  after(async () => {
    for (const child of children) await stopWorkerProcess(child);
  });

  it('still completes each invocation exactly once (not re-sent without the opt-in, re-sent with it)', async () => {
    const taskQueue = `crash-${randomUUID()}`;
    const firstArrived: Record<string, () => void> = {};
    const arrived = {
      plain: new Promise<void>((r) => (firstArrived.plain = r)),
      optIn: new Promise<void>((r) => (firstArrived.optIn = r)),
    };
    const seen: Record<string, number> = { plain: 0, optIn: 0 };
    // Holds the first request of each agent until its caller dies; answers later ones at once.
    const up = await rawUpstream((req, res) => {
      const which = req.url?.includes('opt-in') ? 'optIn' : 'plain';
      void readAll(req).then(() => {
        seen[which] += 1;
        if (seen[which] === 1) return firstArrived[which]();
        res.end(`answered ${which}`);
      });
    }, '/');
    const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
    try {
      const token = await stack().token(`tenant-crash-${randomUUID()}`);
      const plain = await createAgent(token, { upstream_url: `${up.url}plain` });
      const optIn = await createAgent(token, {
        upstream_url: `${up.url}opt-in`,
        retry_non_idempotent: true,
        capture_body: true,
      });

      const first = await startWorkerProcess(taskQueue, { UPSTREAM_TIMEOUT_MS: '60000' });
      children.push(first);
      const invoke = async (agentId: string) => {
        const res = await request(`${gateway.url}/v1/proxy/${agentId}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: 'once',
        });
        assert.equal(res.statusCode, 202);
        return ((await res.body.json()) as { invocation_id: string }).invocation_id;
      };
      const plainId = await invoke(plain);
      const optInId = await invoke(optIn);
      await Promise.all([arrived.plain, arrived.optIn]);
      assert.equal((await waitForRow(plainId, (r) => r.status === 'running')).attempts, 1);

      first.kill('SIGKILL');
      await exited(first);
      children.push(await startWorkerProcess(taskQueue, { UPSTREAM_TIMEOUT_MS: '60000' }));

      const plainRow = await waitForRow(plainId, undefined, 90_000);
      const optInRow = await waitForRow(optInId, undefined, 90_000);

      assert.equal(plainRow.status, 'failed');
      assert.equal(plainRow.errorClass, 'interrupted');
      assert.equal(seen.plain, 1, 'without the opt-in the request reached the upstream once');

      assert.equal(optInRow.status, 'succeeded');
      assert.equal(optInRow.upstreamStatus, 200);
      assert.equal(optInRow.attempts, 2);
      assert.equal(seen.optIn, 2, 'with the opt-in the request was sent again');

      for (const id of [plainId, optInId]) {
        const handle = stack().temporal.workflow.getHandle(id);
        const result = await handle.result();
        assert.equal(result.status, id === plainId ? 'failed' : 'succeeded');
        const events = (await handle.fetchHistory()).events ?? [];
        assert.equal(events.filter((e) => e.activityTaskCompletedEventAttributes).length, 1, 'one activity completion');
        assert.equal(
          events.filter((e) => e.workflowExecutionCompletedEventAttributes).length,
          1,
          'one workflow completion',
        );
        const started = events.find((e) => e.activityTaskStartedEventAttributes)?.activityTaskStartedEventAttributes;
        assert.equal(started?.attempt, 2, 'the second worker ran the retried attempt');
      }
      // Completed once: a late duplicate completion could not overwrite the terminal row.
      const again = await waitForRow(optInId);
      assert.equal(again.completedAt?.getTime(), optInRow.completedAt?.getTime());
    } finally {
      await gateway.close();
      await up.close();
    }
  });

  it('a worker stopped with SIGTERM lets the call it is making finish before it exits', async () => {
    const taskQueue = `drain-${randomUUID()}`;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let arrived!: () => void;
    const atUpstream = new Promise<void>((r) => (arrived = r));
    let requests = 0;
    // Holds the call until the test has asked the worker to stop, then answers it.
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        requests += 1;
        arrived();
        await held;
        res.end('answered after the stop was asked');
      });
    }, '/');
    const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
    try {
      const token = await stack().token(`tenant-drain-${randomUUID()}`);
      const agent = await createAgent(token, { upstream_url: up.url, capture_body: true });
      let output = '';
      const worker = await startWorkerProcess(taskQueue, { UPSTREAM_TIMEOUT_MS: '20000' }, (c) => (output += c));
      children.push(worker);
      const res = await request(`${gateway.url}/v1/proxy/${agent}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'drain me',
      });
      assert.equal(res.statusCode, 202);
      const { invocation_id: id } = (await res.body.json()) as { invocation_id: string };
      await atUpstream;

      worker.kill('SIGTERM');
      const gone = exited(worker);
      // It has taken the stop (the SDK's worker says it is draining: no more polls, the calls in
      // hand still running) and is still there: it waits for the call, not the other way round.
      await waitFor(() => output.includes('"state":"DRAINING"'), { what: 'the worker draining' });
      assert.equal(
        worker.exitCode ?? worker.signalCode,
        null,
        'the worker must not exit while its activity is at the upstream',
      );
      assert.doesNotMatch(output, /"state":"STOPPED"/, 'nor stop with the call at the upstream');
      release();
      await gone;

      const row = await waitForRow(id, undefined, 30_000);
      assert.equal(row.status, 'succeeded', `the call finished on the stopping worker (${row.errorClass})`);
      assert.equal(row.upstreamStatus, 200);
      assert.equal(row.attempts, 1);
      assert.equal(requests, 1);
      // The workflow's last task needs a poller: a worker of the next deployment picks it up.
      children.push(await startWorkerProcess(taskQueue, { UPSTREAM_TIMEOUT_MS: '20000' }));
      assert.equal((await stack().temporal.workflow.getHandle(id).result()).status, 'succeeded');
    } finally {
      await gateway.close();
      await up.close();
    }
  });
});
