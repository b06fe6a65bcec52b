// Chaos 6: a flapping upstream. Healthy, then answering 503: after 5 consecutive failures the
// worker's breaker for that origin opens and calls fail fast as `circuit_open` without reaching
// it; after the half-open pause (10 s, gateway/upstream/breaker.ts) one probe goes through — still
// failing, it re-opens the circuit; once the upstream has recovered, the probe closes it and
// calls flow again. Observed through the invocation records (status, error_class), the counting
// upstream, and the worker's gateway_circuit_breakers gauge (breakers by state).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_BREAKER } from '../../gateway/upstream/breaker.ts';
import {
  awaitTerminal,
  check,
  createAgent,
  invoke,
  withSystem,
  type ChaosScenario,
  type ChaosSystem,
  type InvocationView,
} from './harness.ts';

const HALF_OPEN_WAIT_MS = DEFAULT_BREAKER.halfOpenAfterMs + 1_000;

/** The worker's one breaker (one tenant, one origin) as 0 closed, 1 half-open, 2 open, from the gateway_circuit_breakers counts. */
async function breakerGauge(system: ChaosSystem): Promise<number | null> {
  const text = await (await fetch(system.workerMetricsUrl)).text();
  const count = (state: string) =>
    Number(
      text
        .split('\n')
        .find((l) => l.startsWith(`gateway_circuit_breakers{state="${state}"}`))
        ?.split(' ')
        .pop() ?? 0,
    );
  if (count('open') > 0) return 2;
  if (count('half_open') > 0) return 1;
  return count('closed') > 0 ? 0 : null;
}

export const scenario: ChaosScenario = {
  name: 'flapping-upstream',
  description:
    'a flapping upstream: the breaker opens, calls fail fast, a failed probe re-opens it, a good probe closes it',
  run: () =>
    withSystem({ name: 'flapping-upstream' }, async (system) => {
      const caller = { apiUrl: system.apiUrl, token: await system.token('chaos-flapping') };
      const agentId = await createAgent(caller, { upstream_url: system.upstream.url });
      const run = randomBytes(3).toString('hex');
      let n = 0;
      /** One call, waited for to its end (the breaker's verdicts depend on the order of calls). */
      const call = async (): Promise<{ view: InvocationView; reached: boolean }> => {
        const requestId = `chaos-${run}-${n++}`;
        const r = await invoke(caller, agentId, requestId);
        check(
          r.kind === 'answered' && r.status === 202 && r.invocationId !== null,
          `call ${requestId} not accepted: ${JSON.stringify(r)}`,
        );
        const view = (await awaitTerminal(caller, agentId, [r.invocationId], 60_000)).get(r.invocationId);
        check(
          !!view && (view.status === 'succeeded' || view.status === 'failed'),
          `call ${requestId} not terminal after 60 s`,
        );
        return { view, reached: system.upstream.counts.has(requestId) };
      };
      const describe = (c: { view: InvocationView; reached: boolean }) =>
        `${c.view.status}/${c.view.error_class ?? 'none'}${c.reached ? '' : ' (not sent)'}`;

      // Healthy.
      for (let i = 0; i < 5; i++) {
        const c = await call();
        check(c.view.status === 'succeeded' && c.reached, `healthy upstream: call ${i} ${describe(c)}`);
      }
      const closed0 = await breakerGauge(system);
      check(closed0 === null || closed0 === 0, `breaker gauge ${closed0} with a healthy upstream`);

      // Failing: the breaker opens after the consecutive failures, then calls fail fast.
      system.upstream.mode = 'fail';
      const down: Array<{ view: InvocationView; reached: boolean }> = [];
      for (let i = 0; i < DEFAULT_BREAKER.consecutiveFailures + 5; i++) down.push(await call());
      const reachedWhileFailing = down.filter((c) => c.reached).length;
      const failedFast = down.filter((c) => c.view.error_class === 'circuit_open');
      check(
        reachedWhileFailing <= DEFAULT_BREAKER.consecutiveFailures,
        `${reachedWhileFailing} calls reached a failing upstream (breaker opens after ${DEFAULT_BREAKER.consecutiveFailures})`,
      );
      check(
        failedFast.length >= 5 && failedFast.every((c) => !c.reached && c.view.status === 'failed'),
        `fail-fast calls: ${down.map(describe).join(', ')}`,
      );
      check(
        down.slice(-5).every((c) => c.view.error_class === 'circuit_open'),
        `after the breaker opened: ${down.slice(-5).map(describe).join(', ')}`,
      );
      const open1 = await breakerGauge(system);
      check(open1 === 2, `breaker gauge ${open1} after it opened (2 = open)`);

      // Still failing after the pause: the half-open probe reaches the upstream, fails, re-opens.
      await sleep(HALF_OPEN_WAIT_MS);
      const probe1 = await call();
      check(
        probe1.reached && probe1.view.status === 'failed' && probe1.view.error_class === 'upstream_5xx',
        `first probe (upstream still failing): ${describe(probe1)}`,
      );
      const reopened = await call();
      check(
        reopened.view.error_class === 'circuit_open' && !reopened.reached,
        `after the failed probe: ${describe(reopened)}`,
      );
      const open2 = await breakerGauge(system);
      check(open2 === 2, `breaker gauge ${open2} after the failed probe (2 = open)`);

      // Recovered: the next probe succeeds and closes the circuit.
      system.upstream.mode = 'ok';
      const openWhileRecovered = await call();
      check(
        openWhileRecovered.view.error_class === 'circuit_open' && !openWhileRecovered.reached,
        `recovered upstream, circuit still open: ${describe(openWhileRecovered)}`,
      );
      await sleep(HALF_OPEN_WAIT_MS);
      const probe2 = await call();
      check(
        probe2.reached && probe2.view.status === 'succeeded',
        `second probe (upstream recovered): ${describe(probe2)}`,
      );
      const closed = await breakerGauge(system);
      check(closed === 0, `breaker gauge ${closed} after the good probe (0 = closed)`);
      for (let i = 0; i < 5; i++) {
        const c = await call();
        check(c.view.status === 'succeeded' && c.reached, `after recovery: call ${i} ${describe(c)}`);
      }
      const twice = [...system.upstream.counts].filter(([, count]) => count > 1);
      check(twice.length === 0, `${twice.length} request ids reached the upstream more than once`);

      return (
        `healthy 5/5 succeeded; upstream failing: ${reachedWhileFailing} calls reached it (failed upstream_5xx), then ${failedFast.length} failed fast as circuit_open, not sent, gauge 2; ` +
        `probe after ${HALF_OPEN_WAIT_MS / 1000} s still failing -> re-opened (next call circuit_open); upstream recovered: probe succeeded -> gauge 0, 5/5 succeeded; ` +
        `${system.upstream.total()} upstream requests for ${n} calls`
      );
    }),
};
