// Part 1 of the proxy bench: streaming 1 KiB calls at each concurrency, every target measured
// round-robin in several rounds so drift hits all alike; tables, CPU per call and the checks.
import type { CpuGroups } from './cpu.ts';
import { fmtMs as fmt, say } from './print.ts';
import { load, merge, type Sample, type Target } from './proxy-load.ts';
import { tableLines, type BenchResult } from './result.ts';
import { startStep } from '../scripts/lib/progress.ts';

/** The gateway with the analytics rollups kept by row-level triggers, as before the batched fold. */
export const ROW_TRIGGERS_TARGET = 'gateway, rollup by row triggers (before the fold)';
/** The CPU group of the bench database's backends (bench/proxy.ts). */
export const DATABASE = 'PostgreSQL (bench database backends)';

/** The targets of the streaming comparison: tighter at c=1, where nothing queues. */
function streamingGoals(concurrency: number) {
  return concurrency <= 1 ? { p50: 0.3, p99: 1.5, share: 0.8 } : { p50: 1, p99: 3, share: 0.6 };
}

/** Runs the streaming comparison; returns the target lines for the report's summary. */
export async function runStreaming(
  targets: Target[],
  options: {
    concurrencies: number[];
    rounds: number;
    seconds: number;
    cpu: CpuGroups;
  },
  result: BenchResult,
): Promise<string[]> {
  const { concurrencies: CONCURRENCIES, rounds: ROUNDS, seconds: SECONDS, cpu } = options;
  const streamingTargets: string[] = [];
  for (const concurrency of CONCURRENCIES) {
    const samples = new Map<string, Sample[]>(targets.map((t) => [t.name, []]));
    const streamingStep = startStep(
      `proxy: streaming at concurrency ${concurrency}`,
      `${ROUNDS} rounds × ${targets.length} targets × ${SECONDS} s`,
    );
    for (let round = 0; round < ROUNDS; round++) {
      // Each round starts one target further on, so no target always follows the same one.
      const order = [...targets.slice(round % targets.length), ...targets.slice(0, round % targets.length)];
      for (const t of order) samples.get(t.name)!.push(await load(t, SECONDS, concurrency, cpu));
      streamingStep.progress(round + 1, ROUNDS, 'rounds');
    }
    streamingStep.end();
    const streaming = Object.fromEntries(targets.map((t) => [t.name, merge(samples.get(t.name)!)]));
    const direct = streaming['direct'];
    const bareR = streaming['bare proxy'];
    const gw = streaming['gateway'];
    say();
    say(`## streaming, 1 KiB, concurrency ${concurrency}`);
    say(`| path | p50 | p99 | throughput | requests | errors |`);
    say(`|---|---|---|---|---|---|`);
    const table = {
      title: `streaming, 1 KiB, concurrency ${concurrency}`,
      header: ['path', 'p50', 'p99', 'throughput', 'requests', 'errors'],
      rows: [] as string[][],
    };
    for (const t of targets) {
      const r = streaming[t.name];
      table.rows.push([t.name, fmt(r.p50), fmt(r.p99), `${r.rps.toFixed(0)} req/s`, String(r.n), String(r.errors)]);
      say(`| ${table.rows.at(-1)!.join(' | ')} |`);
    }
    result.tables.push(table);
    const cpuTable = {
      title: `CPU per streamed call, by process, concurrency ${concurrency} (ms; user + system, while the loops ran)`,
      header: ['process', ...targets.map((t) => t.name)],
      rows: Object.keys(cpu).map((name) => [
        name,
        ...targets.map((t) => (streaming[t.name].cpuPerCall.get(name) ?? 0).toFixed(3)),
      ]),
    };
    result.tables.push(cpuTable);
    say();
    for (const line of tableLines(cpuTable, '### ')) say(line);
    const addedP50 = gw.p50 - direct.p50;
    const addedP99 = gw.p99 - direct.p99;
    const share = gw.rps / bareR.rps;
    const goal = streamingGoals(concurrency);
    say();
    say(
      `added by the gateway vs direct:     p50 +${fmt(addedP50)}, p99 +${fmt(addedP99)}  (bare proxy adds p50 +${fmt(bareR.p50 - direct.p50)}, p99 +${fmt(bareR.p99 - direct.p99)})`,
    );
    say(`added by the gateway vs bare proxy: p50 +${fmt(gw.p50 - bareR.p50)}, p99 +${fmt(gw.p99 - bareR.p99)}`);
    say(
      `ratios: gateway/direct p50 ${(gw.p50 / direct.p50).toFixed(2)}×, gateway/bare p50 ${(gw.p50 / bareR.p50).toFixed(2)}×; throughput gateway/bare ${(share * 100).toFixed(0)} %, gateway/direct ${((gw.rps / direct.rps) * 100).toFixed(0)} %`,
    );
    const before = streaming[ROW_TRIGGERS_TARGET];
    if (before) {
      // The analytics fold against the row-level triggers it replaced, in the same rounds.
      const pg = (r: typeof gw) => r.cpuPerCall.get(DATABASE) ?? 0;
      const line = `analytics rollups, c=${concurrency}: PostgreSQL CPU per streamed call ${pg(before).toFixed(3)} ms with row triggers → ${pg(gw).toFixed(3)} ms folded; gateway/bare p50 ${(before.p50 / bareR.p50).toFixed(2)}× → ${(gw.p50 / bareR.p50).toFixed(2)}×, throughput gateway/bare ${((before.rps / bareR.rps) * 100).toFixed(0)} % → ${(share * 100).toFixed(0)} %`;
      say(line);
      streamingTargets.push(`- ${line}`);
      result.checks.push({
        figure: `streaming c=${concurrency}: PostgreSQL CPU per call, folded analytics`,
        measured: `${pg(gw).toFixed(3)} ms`,
        baseline: `row triggers ${pg(before).toFixed(3)} ms`,
        ratio: `${((pg(gw) / Math.max(pg(before), 1e-9)) * 100).toFixed(0)} %`,
        target: 'below the row triggers',
        pass: pg(gw) < pg(before),
      });
    }
    const check = (ok: boolean) => (ok ? 'met' : 'MISSED');
    streamingTargets.push(
      `- c=${concurrency}: streaming adds ≤ ${goal.p50} ms at p50: +${fmt(addedP50)} → ${check(addedP50 <= goal.p50)}`,
      `- c=${concurrency}: streaming adds ≤ ${goal.p99} ms at p99: +${fmt(addedP99)} → ${check(addedP99 <= goal.p99)}`,
      `- c=${concurrency}: throughput ≥ ${goal.share * 100} % of the bare proxy: ${(share * 100).toFixed(0)} % → ${check(share >= goal.share)}`,
    );
    result.checks.push(
      {
        figure: `streaming c=${concurrency}: gateway p50`,
        measured: fmt(gw.p50),
        baseline: `direct ${fmt(direct.p50)}`,
        ratio: `+${fmt(addedP50)}`,
        target: `adds ≤ ${goal.p50} ms`,
        pass: addedP50 <= goal.p50,
      },
      {
        figure: `streaming c=${concurrency}: gateway p99`,
        measured: fmt(gw.p99),
        baseline: `direct ${fmt(direct.p99)}`,
        ratio: `+${fmt(addedP99)}`,
        target: `adds ≤ ${goal.p99} ms`,
        pass: addedP99 <= goal.p99,
      },
      {
        figure: `streaming c=${concurrency}: gateway throughput`,
        measured: `${gw.rps.toFixed(0)} req/s`,
        baseline: `bare proxy ${bareR.rps.toFixed(0)} req/s`,
        ratio: `${(share * 100).toFixed(0)} %`,
        target: `≥ ${goal.share * 100} % of the bare proxy`,
        pass: share >= goal.share,
      },
    );
  }
  return streamingTargets;
}
