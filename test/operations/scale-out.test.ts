// Scale-out: two API processes (`node api/main.ts`) and two gateway worker processes
// (`temporal/gateway-worker-main.ts`) on one task queue of their own, against the stack's one
// Temporal, PostgreSQL and Redis; the stack's in-process worker serves another queue. Calls are
// spread round-robin over both APIs from a few tenants, through HTTP only (Temporal is read to
// see which worker ran what). Shown: limits are shared through Redis (N per bucket in all, not
// N per API), a change made through one API is in force on the other as soon as it answers
// (docs/PROXY.md, "Gate caches"), and with one API and one worker SIGKILLed mid-run every
// accepted call reaches a terminal status, its request delivered to the upstream at most once
// (exactly once when it succeeded). docs/DEPLOYMENT.md cites this as the replicas' proof.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { stack } from '../support/stack.ts';
import { callAt, type Reply } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { startCountingUpstream, type CountingUpstream } from '../../scripts/chaos/upstream.ts';
import { formatTally, tally } from '../../scripts/chaos/report.ts';
import {
  awaitTerminal,
  awaitWorkflow,
  invoke,
  invokeStream,
  runPool,
  type Caller,
  type InvokeResult,
} from '../../scripts/chaos/calls.ts';

// The run's own Redis (test/support/stack.ts), read once the stack is up.
const redisUrl = () => stack().redisUrl;

type Api = { child: ChildProcess; url: string };

describe('scale-out: two APIs and two workers on one Temporal, PostgreSQL and Redis', function () {
  this.timeout(180_000);
  const taskQueue = `scale-${randomUUID()}`;
  const children: ChildProcess[] = [];
  let apis: Api[];
  let workers: ChildProcess[];

  before(async function () {
    this.timeout(150_000);
    const env = { TEMPORAL_TASK_QUEUE: taskQueue, REDIS_URL: redisUrl() };
    // Started together: each worker bundles its workflows, the slow part.
    const started = await Promise.allSettled([
      startApiProcess(env),
      startApiProcess(env),
      startWorkerProcess(taskQueue, env),
      startWorkerProcess(taskQueue, env),
    ]);
    for (const s of started) if (s.status === 'fulfilled') children.push('child' in s.value ? s.value.child : s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    apis = started.slice(0, 2).map((s) => (s as PromiseFulfilledResult<Api>).value);
    workers = started.slice(2).map((s) => (s as PromiseFulfilledResult<ChildProcess>).value);
  });
  after(async function () {
    this.timeout(60_000);
    await Promise.all(children.map((child) => stopWorkerProcess(child)));
  });

  /** A tenant of its own: a token and calls to any API. */
  async function tenant(label: string) {
    const token = await stack().token(`tenant-scale-${label}-${randomUUID()}`);
    const at = (api: Api, method: string, path: string, json?: unknown): Promise<Reply> =>
      callAt(api.url, method, path, { token, json });
    const createAgent = async (api: Api, fields: Record<string, unknown>) => {
      const res = await at(api, 'POST', '/v1/agents', { name: `scale-${randomUUID()}`, ...fields });
      assert.equal(res.status, 201, res.text);
      return res.json.id as string;
    };
    const proxy = (api: Api, agentId: string, stream = false, body = 'hello') =>
      callAt(api.url, 'POST', `/v1/proxy/${agentId}${stream ? '/stream' : ''}`, {
        token,
        body,
        headers: { 'content-type': 'text/plain' },
      });
    return { token, at, createAgent, proxy };
  }

  describe('limits are shared through Redis', () => {
    let upstream: CountingUpstream;
    before(async () => {
      upstream = await startCountingUpstream();
    });
    after(() => upstream.close());

    /** `n` calls one after the other, alternating between the two APIs: their statuses. */
    async function alternate(t: Awaited<ReturnType<typeof tenant>>, agentId: string, n: number) {
      const answers: Reply[] = [];
      for (let i = 0; i < n; i++) answers.push(await t.proxy(apis[i % 2], agentId));
      return answers;
    }

    it("an agent's bucket of N admits N calls over both APIs together, not N on each", async () => {
      const t = await tenant('bucket');
      const N = 10;
      // One token every 1,000 s: the bucket does not refill while the test runs.
      const agentId = await t.createAgent(apis[0], {
        upstream_url: upstream.url,
        rate_limit_rps: 0.001,
        rate_limit_burst: N,
      });
      const answers = await alternate(t, agentId, 2 * N);
      // Each API admitted N/2 and then refused, though alone it would have admitted N.
      const statuses = answers.map((a) => a.status);
      assert.deepEqual(statuses, [...Array(N).fill(202), ...Array(N).fill(429)], statuses.join(' '));
      for (const refused of answers.slice(N)) assert.ok(Number(refused.headers['retry-after']) >= 1, 'Retry-After');
    });

    it("a tenant policy's rate_per_min counts the caller's calls on both APIs together", async () => {
      const t = await tenant('policy-rate');
      const PER_MIN = 6;
      const agentId = await t.createAgent(apis[1], { upstream_url: upstream.url, rate_limit_rps: 1000 });
      const rules = [{ action: 'deny', match: { rate_per_min: PER_MIN } }];
      const put = await t.at(apis[0], 'PUT', '/v1/policy', { default: 'allow', on_error: 'deny', rules });
      assert.equal(put.status, 200, put.text);
      const statuses = (await alternate(t, agentId, 2 * PER_MIN)).map((a) => a.status);
      assert.deepEqual(statuses, [...Array(PER_MIN).fill(202), ...Array(PER_MIN).fill(403)], statuses.join(' '));
    });
  });

  describe('the gate caches are coherent', () => {
    let first: TestUpstream;
    let second: TestUpstream;
    before(async () => {
      [first, second] = await Promise.all([startUpstream(), startUpstream()]);
    });
    after(() => Promise.all([first.close(), second.close()]));

    it('a change through one API is in force on the other for its next call', async () => {
      const t = await tenant('cache');
      const [a, b] = apis;
      const agentId = await t.createAgent(a, { upstream_url: first.url });
      const streamOnB = async () => {
        const res = await t.proxy(b, agentId, true);
        assert.equal(res.status, 200, res.text);
      };

      // B caches the agent with a call, then A moves its upstream: B's next call goes to the new one.
      await streamOnB();
      assert.equal(first.received.length, 1);
      assert.equal((await t.at(a, 'PATCH', `/v1/agents/${agentId}`, { upstream_url: second.url })).status, 200);
      await streamOnB();
      assert.equal(second.received.length, 1, 'the new upstream_url, on the other API');
      assert.equal(first.received.length, 1);

      // Suspended through A: B refuses; unsuspended through B: A admits.
      assert.equal((await t.at(a, 'POST', `/v1/agents/${agentId}/suspend`, {})).status, 200);
      assert.equal((await t.proxy(b, agentId)).status, 422);
      assert.equal((await t.proxy(b, agentId, true)).status, 422);
      assert.equal((await t.at(b, 'POST', `/v1/agents/${agentId}/unsuspend`, {})).status, 200);
      assert.equal((await t.proxy(a, agentId)).status, 202);

      // A policy replaced through A denies on B; removed through B, A admits again.
      const policy = { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { agents: [agentId] } }] };
      assert.equal((await t.at(a, 'PUT', '/v1/policy', policy)).status, 200);
      assert.equal((await t.proxy(b, agentId)).status, 403);
      assert.equal((await t.at(b, 'DELETE', '/v1/policy')).status, 204);
      assert.equal((await t.proxy(a, agentId)).status, 202);

      // Deleted through A: B no longer serves it.
      assert.equal((await t.at(a, 'DELETE', `/v1/agents/${agentId}`)).status, 204);
      assert.equal((await t.proxy(b, agentId, true, 'after delete')).status, 422);
      assert.equal((await t.proxy(b, agentId, false, 'after delete')).status, 422);
      const forwarded = [...first.received, ...second.received].filter((r) => r.body.toString() === 'after delete');
      assert.deepEqual(forwarded, [], 'nothing forwarded after the delete');
    });
  });

  describe('one API and one worker SIGKILLed mid-run', () => {
    const CALLS = 180;
    const KILL_AT = 60;
    const CONCURRENCY = 12;
    let upstream: CountingUpstream;
    before(async () => {
      // Each answer is held a while, so the kills land on calls in flight.
      upstream = await startCountingUpstream(500);
    });
    after(() => upstream.close());

    it('every accepted call reaches a terminal status, delivered to the upstream at most once', async () => {
      const tenants = await Promise.all(['a', 'b', 'c'].map((label) => tenant(`kill-${label}`)));
      const agents = await Promise.all(
        tenants.map((t, i) =>
          t.createAgent(apis[i % 2], { upstream_url: upstream.url, rate_limit_rps: 1000, rate_limit_burst: 1000 }),
        ),
      );
      const [apiKilled, apiKept] = apis;
      let alive = [...apis];
      let sent = 0;
      const run = randomUUID().slice(0, 8);
      /** Invocation id of each transactional call answered so far, by its X-Request-ID. */
      const invocationByRequest = new Map<string, string>();

      type Sent = { i: number; tenant: number; api: Api; stream: boolean; requestId: string; result: InvokeResult };
      // The last third waits for the kills (at most 20 s), so there are calls after them however
      // slowly a loaded machine finds its target.
      let killed!: () => void;
      const kills = new Promise<void>((resolve) => (killed = resolve));
      const calls = runPool(CALLS, CONCURRENCY, async (i): Promise<Sent> => {
        if (i >= 2 * KILL_AT) await Promise.race([kills, sleep(20_000)]);
        const api = alive[i % alive.length];
        const which = i % tenants.length;
        const caller: Caller = { apiUrl: api.url, token: tenants[which].token };
        const requestId = `scale-${run}-${i}`;
        // Every fifth call streams (piped by the API itself, no worker).
        const stream = i % 5 === 4;
        sent++;
        const result = await (stream ? invokeStream : invoke)(caller, agents[which], requestId);
        if (!stream && result.kind === 'answered' && result.invocationId)
          invocationByRequest.set(requestId, result.invocationId);
        return { i, tenant: which, api, stream, requestId, result };
      });

      // The kills, once a third of the calls went out: the API that took the first call, and the
      // worker running the call that reached the upstream last (Temporal names it), so the kill
      // lands on a call in flight.
      let target: { requestId: string; invocationId: string; worker: ChildProcess } | undefined;
      while (!target) {
        await sleep(10);
        if (sent < KILL_AT) continue;
        const requestId = upstream.inFlight().findLast((id) => invocationByRequest.has(id));
        if (!requestId) continue;
        const invocationId = invocationByRequest.get(requestId)!;
        const { raw } = await stack().temporal.workflow.getHandle(invocationId).describe();
        const identity = raw.pendingActivities?.[0]?.lastWorkerIdentity ?? '';
        const worker = workers.find((w) => identity.startsWith(`${w.pid}@`));
        // Still held, checked in the same turn as the kill: the upstream (this process) cannot answer in between.
        if (worker && upstream.inFlight().includes(requestId)) target = { requestId, invocationId, worker };
      }
      const workerKilled = target.worker;
      const inFlightAtKill = upstream.inFlight().length;
      const sentAtKill = sent;
      alive = [apiKept];
      apiKilled.child.kill('SIGKILL');
      workerKilled.kill('SIGKILL');
      await Promise.all([exited(apiKilled.child), exited(workerKilled)]);
      killed();
      const results = await calls;

      const accepted = results.filter(
        (r) => r.result.kind === 'answered' && r.result.status === (r.stream ? 200 : 202) && r.result.invocationId,
      );
      const cut = results.filter((r) => r.result.kind === 'refused');
      const other = results.filter((r) => !accepted.includes(r) && !cut.includes(r));
      assert.deepEqual(
        other.map((r) => (r.result.kind === 'answered' ? `${r.result.status} ${r.result.body}` : '')),
        [],
        'every answer is an acceptance',
      );
      assert.ok(
        cut.every((r) => r.api === apiKilled),
        'only calls to the killed API fail at the client',
      );
      assert.ok(
        results.slice(sentAtKill).every((r) => r.api === apiKept) &&
          accepted.some((r) => r.i >= sentAtKill + CONCURRENCY),
        `the calls after the kill went to the surviving API, which accepted them (kill after ${sentAtKill})`,
      );

      // Every accepted call ends, read through the surviving API.
      const invocationOf = (r: Sent) => (r.result as { invocationId: string }).invocationId;
      const views = new Map<string, { status: string; error_class: string | null } | null>();
      for (let which = 0; which < tenants.length; which++) {
        const ids = accepted.filter((r) => r.tenant === which).map(invocationOf);
        const caller = { apiUrl: apiKept.url, token: tenants[which].token };
        for (const [id, view] of await awaitTerminal(caller, agents[which], ids, 90_000)) views.set(id, view);
      }
      const open = [...views].filter(([, v]) => v?.status !== 'succeeded' && v?.status !== 'failed');
      assert.deepEqual(open, [], 'accepted calls not terminal');
      // The call the killed worker had at the upstream: sent once, not again, and recorded so.
      const cutOff = views.get(target.invocationId);
      assert.deepEqual(
        [cutOff?.status, cutOff?.error_class, upstream.counts.get(target.requestId)],
        ['failed', 'interrupted', 1],
        target.invocationId,
      );

      // Delivered at most once each: exactly once when it succeeded. A transactional call whose
      // worker was killed after it may have sent the request is not re-sent (the agent did not
      // opt in): it ends `failed` as `interrupted`. A streaming call the killed API answered in
      // full may not have had its row completed before the kill: the lost-stream sweep fails it
      // `gateway_lost` (docs/PROXY.md).
      const twice = [...upstream.counts].filter(([, n]) => n > 1);
      assert.deepEqual(twice, [], 'request ids the upstream saw more than once');
      const ours = new Set(results.map((r) => r.requestId));
      assert.deepEqual(
        [...upstream.counts.keys()].filter((id) => !ours.has(id)),
        [],
        'request ids nobody sent',
      );
      const lost = (r: Sent) => r.api === apiKilled && views.get(invocationOf(r))!.error_class === 'gateway_lost';
      const wrong = accepted.filter((r) => {
        const view = views.get(invocationOf(r))!;
        const delivered = upstream.counts.get(r.requestId) ?? 0;
        if (view.status === 'succeeded' || r.stream) return delivered !== 1 || (view.status === 'failed' && !lost(r));
        return view.error_class !== 'interrupted';
      });
      assert.deepEqual(
        wrong.map((r) => `${r.requestId}: ${JSON.stringify(views.get(invocationOf(r)))}`),
        [],
        'delivered other than once when succeeded or streamed, or failed otherwise than the kills explain',
      );

      // Temporal: each transactional call's workflow completed once, with its row's outcome, and
      // both workers of the queue ran calls.
      const transactional = accepted.filter((r) => !r.stream);
      const identities = new Map<string, number>();
      await runPool(transactional.length, 8, async (k) => {
        const id = invocationOf(transactional[k]);
        const { status, result } = await awaitWorkflow(stack().temporal, id, 60_000);
        assert.equal(status, 'COMPLETED', id);
        assert.equal((result as { status: string }).status, views.get(id)!.status, id);
        const history = await stack().temporal.workflow.getHandle(id).fetchHistory();
        for (const e of history.events ?? []) {
          const identity = e.activityTaskStartedEventAttributes?.identity;
          if (identity) identities.set(identity, (identities.get(identity) ?? 0) + 1);
        }
      });
      // The killed worker ran the cut-off call (Temporal named it before the kill); a history
      // names the worker of an activity's last attempt, so the survivor must show there.
      const survivor = workers.find((w) => w !== workerKilled)!;
      assert.ok(
        [...identities.keys()].some((id) => id.startsWith(`${survivor.pid}@`)),
        `the surviving worker ran calls: ${[...identities.keys()]}`,
      );
      // Nobody else ran them, but for the stack's own worker (task queue `gateway`): the test
      // process's API runs a start relay on the same database, and may be the one that starts a
      // call the killed API accepted but had not started.
      const ran = [...workers.map((w) => w.pid), process.pid].map((pid) => `${pid}@`);
      assert.deepEqual(
        [...identities.keys()].filter((id) => !ran.some((prefix) => id.startsWith(prefix))),
        [],
        'activities run by an unknown worker',
      );

      const failed = tally([...views.values()].filter((v) => v!.status === 'failed').map((v) => v!.error_class ?? ''));
      console.log(
        `      ${CALLS} calls over 2 APIs: ${accepted.length} accepted, ${cut.length} cut by the API kill; ` +
          `kills after ${sentAtKill} sent, ${inFlightAtKill} upstream calls in flight then; failed: ${formatTally(failed) || 'none'}; activities by worker: ` +
          [...identities].map(([id, n]) => `${id.split('@')[0]} ${n}`).join(', '),
      );
    });
  });
});
