// Chaos 2: the Temporal dev server stopped and started again (same port, same SQLite file) while
// calls are in flight. The calls accepted before the stop resume and complete. Calls made during
// the outage are accepted (202: their rows, the intents to start, commit without Temporal) into
// the start backlog, and the start relay (temporal/start-relay.ts) starts them once Temporal is
// back: none is lost, none runs twice, all complete after the restart.
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
  type InvokeResult,
} from './harness.ts';

const BEFORE = 60;
const DURING = 10;
const AFTER = 40;
/** Temporal stays down at least this long, so in-flight workflows, the relay and the client's reconnect back-off see a real outage. */
const MIN_OUTAGE_MS = 20_000;

export const scenario: ChaosScenario = {
  name: 'temporal-restart',
  description:
    'the Temporal dev server restarted mid-run: in-flight calls complete, calls during the outage are accepted and complete after it',
  run: () =>
    withSystem({ name: 'temporal-restart', upstreamDelayMs: 500 }, async (system) => {
      const caller = { apiUrl: system.apiUrl, token: await system.token('chaos-temporal') };
      const agentId = await createAgent(caller, { upstream_url: system.upstream.url });
      const run = randomBytes(3).toString('hex');
      const call = (phase: string, i: number) =>
        invoke(caller, agentId, `chaos-${run}-${phase}-${i}`).then((result) => ({
          requestId: `chaos-${run}-${phase}-${i}`,
          result,
        }));

      // A burst, then the stop at once: the upstream answers after 500 ms, so calls are mid-flight.
      const before = await runPool(BEFORE, 20, (i) => call('before', i));
      await system.stopTemporal();
      const downAt = Date.now();
      const [{ n: inFlight }] = await system.sql(
        `select count(*)::int as n from invocations where agent_id = $1 and status in ('pending', 'running')`,
        [agentId],
      );

      // Calls while Temporal is down: accepted into the start backlog.
      const during = await runPool(DURING, 5, async (i) => {
        const t0 = Date.now();
        const r = await call('during', i);
        return { ...r, ms: Date.now() - t0 };
      });
      const [{ n: unstartedDuring }] = await system.sql(
        `select count(*)::int as n from invocations where agent_id = $1 and status = 'pending' and request_id like $2`,
        [agentId, `chaos-${run}-during-%`],
      );
      await sleep(Math.max(0, downAt + MIN_OUTAGE_MS - Date.now()));
      await system.startTemporal();
      const restartedAt = Date.now();
      const outageSeconds = (Date.now() - downAt) / 1000;
      const after = await runPool(AFTER, 10, async (i) => {
        const t0 = Date.now();
        const r = await call('after', i);
        return { ...r, ms: Date.now() - t0 };
      });

      const status = (r: { result: InvokeResult }) =>
        r.result.kind === 'answered' ? String(r.result.status) : 'refused';
      for (const [phase, list] of [
        ['before', before],
        ['during', during],
        ['after', after],
      ] as const) {
        const bad = list.filter((r) => status(r) !== '202');
        check(bad.length === 0, `${phase} the outage: ${formatTally(tally(bad.map(status)))} instead of 202`);
      }
      const notAccepted = during.filter((r) => status(r) !== '202');
      check(
        notAccepted.length === 0,
        `during the outage: ${formatTally(tally(notAccepted.map(status)))} instead of 202 (the backlog has room)`,
      );
      check(
        unstartedDuring === DURING,
        `${unstartedDuring} of the ${DURING} calls accepted during the outage were pending; expected all`,
      );

      // Every 202 completes, its workflow closed, each request sent at most once.
      const accepted = [...before, ...during, ...after]
        .filter((r) => status(r) === '202')
        .map((r) => (r.result as { invocationId: string }).invocationId);
      const views = await awaitTerminal(caller, agentId, accepted, 180_000);
      const open = [...views].filter(([, v]) => !v || (v.status !== 'succeeded' && v.status !== 'failed'));
      check(
        open.length === 0,
        `${open.length} accepted invocations not terminal 180 s after the restart, e.g. ${open[0]?.[0]}`,
      );
      const notCompleted: string[] = [];
      for (const id of accepted) {
        const { status: closed } = await awaitWorkflow(system.temporal, id, 120_000);
        if (closed !== 'COMPLETED') notCompleted.push(`${id} ${closed}`);
      }
      const workflowsClosedMs = Date.now() - restartedAt;
      check(notCompleted.length === 0, `${notCompleted.length} workflows not completed, e.g. ${notCompleted[0]}`);
      const twice = [...system.upstream.counts].filter(([, n]) => n > 1);
      check(twice.length === 0, `${twice.length} request ids reached the upstream more than once`);
      const crashes = [...system.apps.values()].filter((a) => a.unexpectedExits > 0);
      check(crashes.length === 0, `processes exited on their own: ${crashes.map((a) => a.name).join(', ')}`);

      const outcomes = tally(
        [...views.values()].map((v) => (v!.status === 'failed' ? `failed/${v!.error_class}` : v!.status)),
      );
      const slowestDuring = Math.max(...during.map((r) => r.ms)) / 1000;
      return (
        `${BEFORE} accepted before the stop (${inFlight} still in flight when Temporal went down); ` +
        `${DURING} calls during the ${outageSeconds.toFixed(0)} s outage: ${DURING} x 202 (slowest ${slowestDuring.toFixed(1)} s), pending until the restart; ` +
        `${AFTER} accepted after the restart (slowest 202 in ${(Math.max(...after.map((r) => r.ms)) / 1000).toFixed(1)} s); ` +
        `all ${accepted.length} accepted completed (${formatTally(outcomes)}), every workflow COMPLETED within ${(workflowsClosedMs / 1000).toFixed(0)} s of the restart, max 1 upstream request per id`
      );
    }),
};
