// Chaos 2: the Temporal dev server stopped and started again (same port, same SQLite file) while
// calls are in flight. The calls accepted before the stop resume and complete; a call made
// during the outage gets a clear 503 with Retry-After within the start's deadline (2 s; at once
// while the API's channel is known down) — never a 202 that is then lost — and
// leaves no row behind (api/routes/proxy.ts removes the row of a call whose workflow did not
// start) and nothing sent upstream.
import { randomBytes } from 'node:crypto';
import { START_DEADLINE_MS } from '../../api/proxy/start.ts';
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
/** After the restart, how long the API may still refuse calls (503 + Retry-After) before it must accept them. */
const RECOVERY_MS = 5_000;
/** Temporal stays down at least this long (calls during the outage now fail fast), so in-flight workflows and the client's reconnect back-off see a real outage. */
const MIN_OUTAGE_MS = 20_000;

export const scenario: ChaosScenario = {
  name: 'temporal-restart',
  description: 'the Temporal dev server restarted mid-run: in-flight calls complete, calls during the outage get 503',
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

      // Calls while Temporal is down: each must be a 503 (or, should the start have landed, a 202 that completes).
      const during = await runPool(DURING, 5, async (i) => {
        const t0 = Date.now();
        const r = await call('during', i);
        return { ...r, ms: Date.now() - t0 };
      });
      await new Promise((r) => setTimeout(r, Math.max(0, downAt + MIN_OUTAGE_MS - Date.now())));
      await system.startTemporal();
      const restartedAt = Date.now();
      const outageSeconds = (Date.now() - downAt) / 1000;
      // Until the API's channel has reconnected (its back-off is capped at 1 s) it still knows
      // Temporal as down and answers 503 with Retry-After at once: a caller retries after it, as
      // told; within RECOVERY_MS of the restart every call must have been accepted.
      let retried = 0;
      const after = await runPool(AFTER, 10, async (i) => {
        const t0 = Date.now();
        for (;;) {
          const r = await call('after', i);
          const retryAfter =
            r.result.kind === 'answered' && r.result.status === 503 ? Number(r.result.retryAfter) : NaN;
          if (Number.isNaN(retryAfter) || Date.now() - restartedAt > RECOVERY_MS) return { ...r, ms: Date.now() - t0 };
          retried += 1;
          await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
        }
      });

      const status = (r: { result: InvokeResult }) =>
        r.result.kind === 'answered' ? String(r.result.status) : 'refused';
      for (const [phase, list] of [
        ['before', before],
        ['after', after],
      ] as const) {
        const bad = list.filter((r) => status(r) !== '202');
        check(bad.length === 0, `${phase} the outage: ${formatTally(tally(bad.map(status)))} instead of 202`);
      }
      const refusedDuring = during.filter((r) => status(r) !== '202' && status(r) !== '503');
      check(
        refusedDuring.length === 0,
        `during the outage: ${formatTally(tally(refusedDuring.map(status)))}; only 503 (or 202) is acceptable`,
      );
      const unavailable = during.filter((r) => status(r) === '503');
      for (const r of unavailable) {
        const answer = r.result as { body: string; retryAfter: string | null };
        check(answer.retryAfter !== null, `a 503 without Retry-After`);
        check(
          (JSON.parse(answer.body) as { error?: unknown }).error === 'service temporarily unavailable',
          `a 503 with body ${answer.body}`,
        );
      }
      // Fast: the start's deadline bounds the first, the known-down channel answers the rest at once.
      const slowest503Ms = Math.max(0, ...unavailable.map((r) => r.ms));
      check(
        slowest503Ms <= START_DEADLINE_MS + 1_000,
        `a 503 during the outage took ${slowest503Ms} ms (start deadline ${START_DEADLINE_MS} ms)`,
      );
      // A 503'd call leaves nothing: no row, nothing sent.
      const refusedIds = unavailable.map((r) => r.requestId);
      const leftRows = await system.sql(
        'select id, status from invocations where agent_id = $1 and request_id = any($2)',
        [agentId, refusedIds],
      );
      check(
        leftRows.length === 0,
        `${leftRows.length} rows left by calls answered 503, e.g. ${leftRows[0]?.id} ${leftRows[0]?.status}`,
      );
      const sentAnyway = refusedIds.filter((id) => system.upstream.counts.has(id));
      check(sentAnyway.length === 0, `${sentAnyway.length} calls answered 503 reached the upstream`);

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
      const slowest503 = slowest503Ms / 1000;
      return (
        `${BEFORE} accepted before the stop (${inFlight} still in flight when Temporal went down); ` +
        `${DURING} calls during the ${outageSeconds.toFixed(0)} s outage: ${unavailable.length} x 503 with Retry-After (slowest after ${slowest503.toFixed(1)} s), ` +
        `${DURING - unavailable.length} x 202, no row and nothing sent for a 503; ${AFTER} accepted after the restart (slowest 202 in ${(Math.max(...after.map((r) => r.ms)) / 1000).toFixed(1)} s, ${retried} retries after a 503 + Retry-After); ` +
        `all ${accepted.length} accepted completed (${formatTally(outcomes)}), every workflow COMPLETED within ${(workflowsClosedMs / 1000).toFixed(0)} s of the restart, max 1 upstream request per id`
      );
    }),
};
