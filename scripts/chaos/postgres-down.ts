// Chaos 3: PostgreSQL (an embedded server of this scenario's own) stopped under a running
// gateway. While it is down, proxied calls fail closed — 500 with no body, nothing forwarded
// (the counting upstream proves it) — and /readyz answers 503 naming the database. When it
// returns, everything recovers without restarting a process: the pools reconnect, /readyz is
// 200 again, new calls complete, and calls that were in flight at the stop complete too.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  awaitTerminal,
  check,
  createAgent,
  formatTally,
  invoke,
  invokeStream,
  runPool,
  tally,
  withSystem,
  type ChaosScenario,
  type InvokeResult,
} from './harness.ts';

const CALLS = 20;
const OUTAGE_MS = 15_000;
const STREAMS = 5;

async function readiness(apiUrl: string): Promise<{ status: number; checks: Record<string, boolean> }> {
  const res = await fetch(`${apiUrl}/readyz`, { signal: AbortSignal.timeout(30_000) });
  return { status: res.status, checks: ((await res.json()) as { checks: Record<string, boolean> }).checks };
}

export const scenario: ChaosScenario = {
  name: 'postgres-down',
  description:
    'PostgreSQL stopped and started again: calls fail closed (500, nothing forwarded), /readyz says so, everything recovers without a restart',
  run: () =>
    withSystem({ name: 'postgres-down', embeddedPostgres: true, upstreamDelayMs: 1_000 }, async (system) => {
      const caller = { apiUrl: system.apiUrl, token: await system.token('chaos-postgres') };
      const agentId = await createAgent(caller, { upstream_url: system.upstream.url });
      const run = randomBytes(3).toString('hex');
      const call = (phase: string, i: number) =>
        invoke(caller, agentId, `chaos-${run}-${phase}-${i}`).then((result) => ({
          requestId: `chaos-${run}-${phase}-${i}`,
          result,
        }));
      const status = (r: { result: InvokeResult }) =>
        r.result.kind === 'answered' ? String(r.result.status) : 'refused';
      const accepted = (list: Array<{ result: InvokeResult }>) =>
        list.filter((r) => status(r) === '202').map((r) => (r.result as { invocationId: string }).invocationId);

      const ready0 = await readiness(system.apiUrl);
      check(ready0.status === 200, `/readyz before the stop: ${ready0.status} ${JSON.stringify(ready0.checks)}`);
      // Calls whose upstream answer (1 s) is still pending when the database goes away.
      const inFlight = await runPool(CALLS, 10, (i) => call('inflight', i));
      check(accepted(inFlight).length === CALLS, `before the stop: ${formatTally(tally(inFlight.map(status)))}`);
      // Stop once the upstream holds every one of them: their answers arrive with the database gone.
      const waitStart = Date.now();
      while (system.upstream.total() < CALLS && Date.now() - waitStart < 30_000) await sleep(20);
      await system.stopPostgres();
      const downAt = Date.now();
      const upstreamAtStop = system.upstream.total();

      // /readyz may answer from a check up to 1 s old: the outage shows within 3 s.
      let ready1 = await readiness(system.apiUrl);
      for (
        const until = Date.now() + 3_000;
        ready1.status === 200 && Date.now() < until;
        ready1 = await readiness(system.apiUrl)
      )
        await sleep(200);
      check(
        ready1.status === 503 && ready1.checks.database === false,
        `/readyz with PostgreSQL down: ${ready1.status} ${JSON.stringify(ready1.checks)}`,
      );
      // Requests the in-flight calls had already sent still land at the upstream after the stop;
      // give them time, so what follows counts only the outage calls.
      await sleep(1_500);
      const sentBefore = system.upstream.total();
      const during = await runPool(CALLS, 5, async (i) => {
        const t0 = Date.now();
        const r = await call('down', i);
        return { ...r, ms: Date.now() - t0 };
      });
      const bad = during.filter((r) => r.result.kind !== 'answered' || r.result.status !== 500 || r.result.body !== '');
      check(
        bad.length === 0,
        `with PostgreSQL down: ${formatTally(tally(bad.map((r) => (r.result.kind === 'answered' ? `${r.result.status} "${r.result.body}"` : 'refused'))))} (expected 500, no body)`,
      );
      const forwarded = during.filter((r) => system.upstream.counts.has(r.requestId));
      check(
        forwarded.length === 0 && system.upstream.total() === sentBefore,
        `${forwarded.length} calls reached the upstream while PostgreSQL was down`,
      );
      const slowest500 = Math.max(...during.map((r) => r.ms)) / 1000;
      // The streaming endpoint fails closed too: nothing is piped up without its row.
      const streamed = await runPool(STREAMS, 5, (i) =>
        invokeStream(caller, agentId, `chaos-${run}-stream-down-${i}`).then((result) => ({
          requestId: `chaos-${run}-stream-down-${i}`,
          result,
        })),
      );
      const badStreams = streamed.filter(
        (r) =>
          r.result.kind !== 'answered' ||
          r.result.status !== 500 ||
          r.result.body !== '' ||
          system.upstream.counts.has(r.requestId),
      );
      check(
        badStreams.length === 0,
        `streaming with PostgreSQL down: ${badStreams.map((r) => (r.result.kind === 'answered' ? `${r.result.status} "${r.result.body.slice(0, 60)}"${system.upstream.counts.has(r.requestId) ? ' forwarded' : ''}` : 'refused')).join(', ')} (expected 500, no body, not forwarded)`,
      );
      // A real outage, not a blip: the workers' retries and the pools' reconnects must span it.
      while (Date.now() - downAt < OUTAGE_MS) await sleep(250);

      await system.startPostgres();
      const outageSeconds = (Date.now() - downAt) / 1000;
      const upAt = Date.now();
      let ready2 = await readiness(system.apiUrl);
      while (ready2.status !== 200 && Date.now() - upAt < 60_000) {
        await sleep(250);
        ready2 = await readiness(system.apiUrl);
      }
      check(
        ready2.status === 200,
        `/readyz 60 s after PostgreSQL returned: ${ready2.status} ${JSON.stringify(ready2.checks)}`,
      );
      const recoverySeconds = (Date.now() - upAt) / 1000;

      const after = await runPool(CALLS, 10, (i) => call('after', i));
      check(accepted(after).length === CALLS, `after PostgreSQL returned: ${formatTally(tally(after.map(status)))}`);
      const streamedAfter = await runPool(STREAMS, 5, (i) =>
        invokeStream(caller, agentId, `chaos-${run}-stream-up-${i}`),
      );
      check(
        streamedAfter.every((r) => r.kind === 'answered' && r.status === 200),
        `streaming after PostgreSQL returned: ${formatTally(tally(streamedAfter.map((r) => (r.kind === 'answered' ? String(r.status) : 'refused'))))}`,
      );

      const views = await awaitTerminal(caller, agentId, [...accepted(inFlight), ...accepted(after)], 180_000);
      const open = [...views].filter(([, v]) => !v || (v.status !== 'succeeded' && v.status !== 'failed'));
      check(
        open.length === 0,
        `${open.length} invocations not terminal 180 s after PostgreSQL returned, e.g. ${open[0]?.[0]} ${open[0]?.[1]?.status ?? 'missing'}`,
      );
      const afterOutcomes = accepted(after).map((id) => views.get(id)!.status);
      check(
        afterOutcomes.every((s) => s === 'succeeded'),
        `calls after the recovery: ${formatTally(tally(afterOutcomes))}`,
      );
      const twice = [...system.upstream.counts].filter(([, n]) => n > 1);
      check(twice.length === 0, `${twice.length} request ids reached the upstream more than once`);
      const restarted = [...system.apps.values()].filter((a) => a.unexpectedExits > 0);
      check(
        restarted.length === 0,
        `processes exited while PostgreSQL was down: ${restarted.map((a) => a.name).join(', ')}`,
      );

      const inFlightOutcomes = tally(
        accepted(inFlight).map((id) =>
          views.get(id)!.status === 'failed' ? `failed/${views.get(id)!.error_class}` : views.get(id)!.status,
        ),
      );
      return (
        `${CALLS} calls in flight at the stop (${upstreamAtStop} sent upstream) all completed (${formatTally(inFlightOutcomes)}); ` +
        `PostgreSQL down ${outageSeconds.toFixed(0)} s: /readyz 503 {database: false}, ${CALLS} calls and ${STREAMS} streaming calls -> all 500 with no body (slowest ${slowest500.toFixed(1)} s), 0 forwarded; ` +
        `/readyz 200 again ${recoverySeconds.toFixed(1)} s after it returned, ${CALLS} new calls succeeded, ${STREAMS} streaming calls 200; no process restarted`
      );
    }),
};
