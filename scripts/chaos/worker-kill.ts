// Chaos 1: 1,000 transactional invocations while the gateway worker is SIGKILLed five times and
// the API once. Every accepted call (202) must end `succeeded` or `failed` exactly once (row,
// API and workflow result agree), none is lost, and the counting upstream sees no request id
// twice (the agent does not allow re-sending: an attempt cut by a kill ends `interrupted`).
// Every fourth call goes to an A2A agent on the same upstream (a JSON-RPC SendMessage): the same
// guarantees, and the task each succeeded one's answer named is bound to that agent.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  awaitTerminal,
  awaitWorkflow,
  check,
  createAgent,
  formatTally,
  invoke,
  runPool,
  tally,
  withSystem,
  type ChaosScenario,
  type InvocationView,
  type InvokeResult,
} from './harness.ts';

const CALLS = Number(process.env.CHAOS_CALLS ?? 1000);
const CONCURRENCY = 20;
/** The faults, in order; the calls are spread over them so each lands on a run under load. */
const FAULTS = ['worker', 'worker', 'worker', 'api', 'worker', 'worker'] as const;

export const scenario: ChaosScenario = {
  name: 'worker-kill',
  description: `${CALLS} transactional calls while the gateway worker is SIGKILLed 5 times and the API once`,
  run: () =>
    withSystem({ name: 'worker-kill', upstreamDelayMs: 50 }, async (system) => {
      const caller = { apiUrl: system.apiUrl, token: await system.token('chaos-worker-kill') };
      const agentId = await createAgent(caller, { upstream_url: system.upstream.url });
      const a2aAgentId = await createAgent(caller, { upstream_url: system.upstream.url, protocol: 'a2a' });
      const agentOf = (i: number) => (i % 4 === 3 ? a2aAgentId : agentId);
      const bodyOf = (i: number) =>
        i % 4 === 3
          ? JSON.stringify({
              jsonrpc: '2.0',
              id: i,
              method: 'SendMessage',
              params: { message: { messageId: `m-${i}`, role: 'ROLE_USER', parts: [{ text: `call ${i}` }] } },
            })
          : JSON.stringify({ call: i });
      const run = randomBytes(3).toString('hex');
      const started = Date.now();

      // The faults advance with the calls: fault k happens once k/(faults+1) of the calls were sent,
      // and the calls wait for it (and for the restarted process) before going on.
      let sent = 0;
      let faultsDone = 0;
      let apiDown = false;
      const chaos = (async () => {
        for (const target of FAULTS) {
          while (sent < ((faultsDone + 1) * CALLS) / (FAULTS.length + 1)) await sleep(20);
          if (target === 'api') apiDown = true;
          await system.kill(target);
          await sleep(target === 'api' ? 1_000 : 500);
          await system.start(target);
          apiDown = false;
          faultsDone++;
        }
      })();

      const results: Array<{ requestId: string; agent: string; result: InvokeResult }> = await runPool(
        CALLS,
        CONCURRENCY,
        async (i) => {
          while (faultsDone < FAULTS.length && sent >= ((faultsDone + 1) * CALLS) / (FAULTS.length + 1) + CONCURRENCY)
            await sleep(20);
          sent++;
          const requestId = `chaos-${run}-${i}`;
          const result = await invoke(caller, agentOf(i), requestId, bodyOf(i));
          // The API is down: wait for it instead of burning the remaining calls on refusals.
          if (result.kind === 'refused') while (apiDown) await sleep(100);
          return { requestId, agent: agentOf(i), result };
        },
      );
      await chaos;
      const sendSeconds = (Date.now() - started) / 1000;

      const accepted = results.filter((r) => r.result.kind === 'answered' && r.result.status === 202);
      const refused = results.filter((r) => r.result.kind === 'refused');
      const other = results.filter((r) => r.result.kind === 'answered' && r.result.status !== 202);
      check(
        other.length === 0,
        `answers other than 202: ${formatTally(tally(other.map((r) => String((r.result as { status: number }).status))))}`,
      );
      const byInvocation = new Map(
        accepted.map((r) => [(r.result as { invocationId: string }).invocationId, r.requestId]),
      );

      // Every accepted call ends, exactly once: the API's view is terminal ...
      const agentOfInvocation = new Map(
        accepted.map((r) => [(r.result as { invocationId: string }).invocationId, r.agent]),
      );
      const views = new Map<string, InvocationView | null>();
      for (const agent of [agentId, a2aAgentId]) {
        const ids = [...byInvocation.keys()].filter((id) => agentOfInvocation.get(id) === agent);
        for (const [id, view] of await awaitTerminal(caller, agent, ids, 300_000)) views.set(id, view);
      }
      const open = [...views].filter(([, v]) => !v || (v.status !== 'succeeded' && v.status !== 'failed'));
      check(
        open.length === 0,
        `${open.length} accepted invocations not terminal after 300 s, e.g. ${open[0]?.[0]} ${open[0]?.[1]?.status ?? 'missing'}`,
      );

      // ... its workflow is closed as completed and returned the same outcome the row holds ...
      const mismatched: string[] = [];
      await runPool(byInvocation.size, 20, async (i) => {
        const id = [...byInvocation.keys()][i];
        const { status, result } = await awaitWorkflow(system.temporal, id, 120_000);
        const outcome = result as { status?: string } | undefined;
        if (status !== 'COMPLETED' || outcome?.status !== views.get(id)!.status)
          mismatched.push(`${id}: ${status}/${outcome?.status} vs row ${views.get(id)!.status}`);
      });
      check(
        mismatched.length === 0,
        `${mismatched.length} workflows not completed or disagreeing with their row, e.g. ${mismatched[0]}`,
      );

      // ... and the upstream saw no request twice; a succeeded call exactly once.
      const twice = [...system.upstream.counts].filter(([, n]) => n > 1);
      check(
        twice.length === 0,
        `${twice.length} request ids reached the upstream more than once, e.g. ${twice[0]?.[0]}`,
      );
      const ours = new Set(results.map((r) => r.requestId));
      const strangers = [...system.upstream.counts.keys()].filter((id) => !ours.has(id));
      check(strangers.length === 0, `the upstream saw request ids nobody sent: ${strangers.slice(0, 3).join(', ')}`);
      const unsent = [...views].filter(
        ([id, v]) => v!.status === 'succeeded' && system.upstream.counts.get(byInvocation.get(id)!) !== 1,
      );
      check(
        unsent.length === 0,
        `${unsent.length} succeeded invocations the upstream did not see exactly once, e.g. ${unsent[0]?.[0]}`,
      );

      // Calls cut by the API's kill never got an answer; their rows, if written, must not run twice
      // either. A row committed whose workflow never started (the kill fell between the commit
      // and the start) is an accepted call: the restarted API's start relay starts it
      // (temporal/start-relay.ts), and it completes once like the others.
      const rows = await system.sql('select id, status from invocations where agent_id = any($1)', [
        [agentId, a2aAgentId],
      ]);
      const orphans = rows.filter(
        (r) => !byInvocation.has(String(r.id)) && (r.status === 'pending' || r.status === 'running'),
      );
      const unanswered = rows.filter((r) => !byInvocation.has(String(r.id)));
      // Rows of unanswered calls whose workflow did start complete on their own; give them time.
      const openRows = async () =>
        (
          await system.sql(
            `select count(*)::int as n from invocations where agent_id = any($1) and status in ('pending', 'running')`,
            [[agentId, a2aAgentId]],
          )
        )[0].n as number;
      let stillOpen = await openRows();
      for (const until = Date.now() + 60_000; stillOpen > 0 && Date.now() < until; stillOpen = await openRows())
        await sleep(1_000);
      check(stillOpen === 0, `${stillOpen} rows still pending or running after the start relay's rounds`);

      // The A2A calls: each succeeded one's task (named after its request id) is bound to the agent.
      const a2aSucceeded = [...views].filter(
        ([id, v]) => agentOfInvocation.get(id) === a2aAgentId && v!.status === 'succeeded',
      );
      const bound = new Set(
        (await system.sql('select task_id from a2a_tasks where agent_id = $1', [a2aAgentId])).map((r) =>
          String(r.task_id),
        ),
      );
      const unbound = a2aSucceeded.filter(([id]) => !bound.has(`task-${byInvocation.get(id)}`));
      check(
        unbound.length === 0,
        `${unbound.length} succeeded A2A calls whose task is not bound, e.g. ${unbound[0]?.[0]}`,
      );

      const apps = [...system.apps.values()];
      const crashes = apps.filter((a) => a.unexpectedExits > 0);
      check(
        crashes.length === 0,
        `processes exited on their own: ${crashes.map((a) => `${a.name} x${a.unexpectedExits}`).join(', ')}`,
      );
      const failedClasses = tally(
        [...views.values()].filter((v) => v!.status === 'failed').map((v) => v!.error_class ?? 'none'),
      );
      const statuses = tally([...views.values()].map((v) => v!.status));
      return (
        `${CALLS} calls in ${sendSeconds.toFixed(0)} s: ${accepted.length} accepted (202), ${refused.length} refused while the API was down; ` +
        `${statuses.succeeded ?? 0} succeeded, ${statuses.failed ?? 0} failed (${formatTally(failedClasses) || 'none'}); ` +
        `${accepted.length} workflows completed, outcome = row (${agentOfInvocation.size - [...agentOfInvocation.values()].filter((a) => a === agentId).length} of them A2A SendMessage, ${a2aSucceeded.length} succeeded, each task bound); upstream saw ${system.upstream.total()} requests, max 1 per request id; ` +
        `worker SIGKILLed ${system.apps.get('worker')!.kills}x, API ${system.apps.get('api')!.kills}x; ` +
        `${unanswered.length} rows of unanswered calls (${orphans.length} pending or running at the end of the calls, 0 open after the start relay's rounds)`
      );
    }),
};
