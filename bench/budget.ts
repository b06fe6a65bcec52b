// `npm run bench:budget`: what a matching budget adds to a streamed call (docs/API.md "Budgets";
// target: ≤ 0.1 ms at p50). One stack (bench/stack.ts) with a 1 KiB upstream and two gateway API
// processes (`node api/main.ts`): one with REDIS_URL (limits and budgets in Redis, as replicas
// run them) and one without (both in the process's memory). Each is called by a tenant without
// budgets and by one whose every call matches a hard budget that never refuses
// (bench/stack.ts createBenchBudget), so every call takes the budget stage's whole path.
// 1. Latency, at each concurrency: each loop alternates one call of each tenant
//    (proxy-load.ts loadPaired), several rounds, so the machine's other work falls on both
//    alike; the added p50 is their difference.
// 2. CPU per call, by process: each tenant's calls alone in their own windows (round-robin), the
//    CPU of the gateway, Redis, PostgreSQL's backends, the upstream and this process divided
//    by the calls completed: what the budget costs each process, whatever the latency shows.
// 3. The check alone in this process against the same Redis (budget-check.ts): the rate
//    limiter's take every call makes, that take then the reservation (two round trips), and the
//    door's one script doing both.
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { startStep, timedStep } from '../scripts/lib/progress.ts';
import { parseCommand } from '../scripts/lib/cli.ts';
import { findPids, type CpuGroups } from './cpu.ts';
import { databaseBackends } from './database-cpu.ts';
import { fmtMs as fmt, say } from './print.ts';
import { measureBudgetCheck } from './budget-check.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { load, loadPaired, merge, type Sample, type Target } from './proxy-load.ts';
import { finishResult, runAsMain, startResult, tableLines, type BenchResult } from './result.ts';
import { createBenchAgent, createBenchBudget, gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';

/** What a matching budget may add to a streamed call at p50 (docs/API.md "Budgets"). */
const BUDGET_P50_MS = 0.1;

/** Milliseconds to the microsecond: the check alone is a few hundredths of one. */
const micro = (ms: number) => `${ms.toFixed(3)} ms`;

const USAGE = `usage: npm run bench:budget [-- --concurrency 1,8 --seconds 5 --rounds 3 --checks 20000 --profile DIR --json FILE]
  What a matching budget adds to a streamed call, with Redis and in memory (docs/BENCHMARKS.md,
  "Budget check"); --json writes the result to FILE.`;

const parseOptions = (argv: string[]) =>
  parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      concurrency: { type: 'string', default: '1,8' },
      seconds: { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      /** Calls of the check measured alone. */
      checks: { type: 'string', default: '20000' },
      /** Write a CPU profile of the gateway with REDIS_URL into this directory (for finding hot spots). */
      profile: { type: 'string' },
    },
  });

type Gateway = { name: string; child: ChildProcess; without: Target; with: Target };

export async function runBudgetBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseOptions(argv);
  const CONCURRENCIES = args.concurrency.split(',').map(Number);
  const SECONDS = Number(args.seconds);
  const ROUNDS = Number(args.rounds);
  const CHECKS = Number(args.checks);
  const children: ChildProcess[] = [];
  const setup = `concurrency ${CONCURRENCIES.join(' and ')}, ${ROUNDS} rounds × ${SECONDS} s alternating and ${ROUNDS} rounds × ${SECONDS} s per tenant alone, 1 KiB bodies; ${CHECKS} checks alone`;
  const result = startResult('budget', `npm run bench:budget -- ${argv.join(' ')}`.trim().replace(/ --$/, ''), setup);
  let infra: Infra | undefined;
  const dataDir = join(tmpdir(), `gw-bench-budget-${process.pid}`);
  try {
    say(`# budget benchmark: ${setup}`);
    infra = await startBenchInfra('budget', dataDir, { redis: true });
    const upstream = spawnInto(children, ['bench/proxy-servers.ts', 'upstream']);
    const upstreamUrl = `http://127.0.0.1:${await listeningPort(upstream)}`;

    const gateways: Gateway[] = [];
    for (const [name, env] of [
      ['Redis (REDIS_URL, as replicas run)', { REDIS_URL: infra.redisUrl! }],
      ['memory (no REDIS_URL, one process)', {}],
    ] as const) {
      const port = await freePort();
      const profiled = args.profile && 'REDIS_URL' in env ? ['--cpu-prof', `--cpu-prof-dir=${args.profile}`] : [];
      const child = spawnInto(children, [...profiled, 'api/main.ts'], { ...gatewayEnvironment(infra, port), ...env });
      child.stderr!.on('data', (d: Buffer) => process.stderr.write(`[gateway, ${name}] ${d}`));
      const url = `http://127.0.0.1:${port}`;
      const plain = await createBenchAgent(url, infra, upstreamUrl);
      const budgeted = await createBenchAgent(url, infra, upstreamUrl);
      await createBenchBudget(url, budgeted.auth);
      const path = (id: string) => `/v1/proxy/${id}/stream`;
      gateways.push({
        name,
        child,
        without: { name: 'no budget', origin: url, path: path(plain.agent.id), headers: plain.auth },
        with: { name: 'a matching budget', origin: url, path: path(budgeted.agent.id), headers: budgeted.auth },
      });
    }
    const database = await databaseBackends(infra.databaseUrl);
    const redisPort = new URL(infra.redisUrl!).port;
    await timedStep('budget: warm-up', '1 s per target', async () => {
      for (const g of gateways) for (const t of [g.without, g.with]) await load(t, 1, Math.max(...CONCURRENCIES));
    });

    for (const concurrency of CONCURRENCIES) {
      for (const g of gateways) {
        // 1. Latency, requests alternating.
        const pairs: Array<[Sample, Sample]> = [];
        const pairStep = startStep(
          `budget: ${g.name}, concurrency ${concurrency}, alternating`,
          `${ROUNDS} rounds × ${SECONDS} s`,
        );
        for (let round = 0; round < ROUNDS; round++) {
          pairs.push(await loadPaired(g.without, g.with, SECONDS, concurrency));
          pairStep.progress(round + 1, ROUNDS, 'rounds');
        }
        pairStep.end();
        const without = merge(pairs.map((p) => p[0]));
        const withBudget = merge(pairs.map((p) => p[1]));
        const added = withBudget.p50 - without.p50;

        // 2. CPU per call, each tenant alone.
        const cpu: CpuGroups = {
          'gateway API': () => [g.child.pid!],
          Redis: () => findPids('redis-server', `:${redisPort}`),
          'PostgreSQL (bench database backends)': database.pids,
          upstream: () => [upstream.pid!],
          'load generator (this process)': () => [process.pid],
        };
        const alone = new Map<string, Sample[]>([
          [g.without.name, []],
          [g.with.name, []],
        ]);
        const aloneStep = startStep(
          `budget: ${g.name}, concurrency ${concurrency}, each alone`,
          `${ROUNDS} rounds × 2 × ${SECONDS} s`,
        );
        for (let round = 0; round < ROUNDS; round++) {
          const order = round % 2 === 0 ? [g.without, g.with] : [g.with, g.without];
          for (const t of order) alone.get(t.name)!.push(await load(t, SECONDS, concurrency, cpu));
          aloneStep.progress(round + 1, ROUNDS, 'rounds');
        }
        aloneStep.end();
        const aloneWithout = merge(alone.get(g.without.name)!);
        const aloneWith = merge(alone.get(g.with.name)!);

        const table = {
          title: `${g.name}, streaming 1 KiB, concurrency ${concurrency}`,
          header: [
            'calls',
            'p50 (alternating)',
            'p99 (alternating)',
            'requests',
            'errors',
            'p50 alone',
            'throughput alone',
          ],
          rows: [
            [without, aloneWithout, g.without.name],
            [withBudget, aloneWith, g.with.name],
          ].map(([paired, single, name]) => {
            const p = paired as typeof without;
            const s = single as typeof without;
            return [
              name as string,
              fmt(p.p50),
              fmt(p.p99),
              String(p.n),
              String(p.errors + s.errors),
              fmt(s.p50),
              `${s.rps.toFixed(0)} req/s`,
            ];
          }),
        };
        const cpuTable = {
          title: `CPU per call by process, ${g.name}, concurrency ${concurrency} (ms; user + system, each tenant's calls alone)`,
          header: ['process', g.without.name, g.with.name, 'added'],
          rows: Object.keys(cpu).map((name) => {
            const a = aloneWithout.cpuPerCall.get(name) ?? 0;
            const b = aloneWith.cpuPerCall.get(name) ?? 0;
            return [name, a.toFixed(3), b.toFixed(3), `${b - a >= 0 ? '+' : ''}${(b - a).toFixed(3)}`];
          }),
        };
        result.tables.push(table, cpuTable);
        say();
        for (const line of tableLines(table, '## ')) say(line);
        say();
        for (const line of tableLines(cpuTable, '### ')) say(line);
        say(
          `budget check, ${g.name}, c=${concurrency}: p50 +${fmt(added)} (${(withBudget.p50 / without.p50).toFixed(3)}×), alone +${fmt(aloneWith.p50 - aloneWithout.p50)}`,
        );
        result.checks.push({
          figure: `budget check, ${g.name}, c=${concurrency}: matching budget p50`,
          measured: fmt(withBudget.p50),
          baseline: `no budget ${fmt(without.p50)}`,
          ratio: `${added >= 0 ? '+' : ''}${fmt(added)} (${(withBudget.p50 / without.p50).toFixed(3)}×)`,
          target: `adds ≤ ${BUDGET_P50_MS} ms`,
          pass: added <= BUDGET_P50_MS,
        });
      }
    }
    await database.end();

    // 3. The check alone.
    const alone = await timedStep('budget: the check alone', `${CHECKS} calls`, () =>
      measureBudgetCheck(infra!.redisUrl!, CHECKS),
    );
    const table = {
      title: `the check alone, in one process against the bench's Redis (${alone.n} calls, interleaved)`,
      header: ['step', 'p50', 'p99'],
      rows: [
        ['rate limit take (every call)', alone.take],
        ['take, then the reservation (two round trips: MCP, A2A, a payer-scoped budget)', alone.takeThenReserve],
        ['take and reservation in one script (an HTTP agent at the /v1 door)', alone.takeAndReserve],
      ].map(([step, t]) => [step as string, micro((t as { p50: number }).p50), micro((t as { p99: number }).p99)]),
    };
    result.tables.push(table);
    say();
    for (const line of tableLines(table, '## ')) say(line);
  } finally {
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runBudgetBench);
