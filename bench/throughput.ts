// `npm run bench:throughput [-- --concurrency 16 --seconds 15 --rounds 2 --warmup 5 --settle 2 --profile DIR]`
//
// Sustained throughput of transactional invocations completed end to end, against a bare
// echo workflow on the same Temporal server, in one run:
// - gateway: POST /v1/proxy/{id} (1 KiB body) → 202 → the invocation's workflow (its id is the
//   invocation id) awaited with the Temporal client → its outcome `succeeded`; at the end every
//   counted invocation's row is checked to be `succeeded` in PostgreSQL. The start travels beside
//   the 202, so the first ask for the workflow waits FIRST_ASK_MS and an ask that finds none yet
//   is repeated after doubling waits (acceptedResult): asks Temporal answers "not found" are
//   server CPU the load generator causes, not the gateway; the wait is in the latency.
// - bare: client.workflow.start of EchoWorkflow (bench/echo-workflow.ts: one activity that POSTs
//   the same 1 KiB to the same upstream) → its result awaited the same way.
// Each caller loop sends its next call as soon as the previous one completed, `concurrency`
// loops per target. A measurement counts the calls completing inside a window of `seconds`
// that opens `settle` seconds after the loops start (so the pipeline is full), and the targets
// take turns, `rounds` windows each, so drift of a shared machine hits both alike.
// Processes: Temporal dev server (as for the tests), the upstream, the gateway API and the
// gateway worker (as `npm start` runs them), the bare worker (bench/echo-worker.ts, the gateway
// worker's tuning), and this load generator.
// `npm run bench` (bench/run.ts) calls runThroughputBench and puts its result in docs/BENCHMARKS.md.
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Pool } from 'undici';
import type { Client } from '@temporalio/client';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort, waitFor } from '../scripts/lib/ports.ts';
import { startStep, timedStep } from '../scripts/lib/progress.ts';
import { connectClient } from '../temporal/client.ts';
import type { InvocationOutcome } from '../activities/invocation.ts';
import { AgentId, InvocationStatus, TenantId } from '../temporal/search-attributes.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { cpuBetween, cpuSnapshot, findPids, type CpuGroups } from './cpu.ts';
import { databaseBackends } from './database-cpu.ts';
import { createBenchAgent, gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';
import { finishResult, runAsMain, startResult, tableLines, type BenchResult, percentile } from './result.ts';
import { parseCommand } from '../scripts/lib/cli.ts';

const USAGE = `usage: npm run bench:throughput [-- --concurrency 16 --seconds 15 --rounds 2 --warmup 5 --settle 2 --profile DIR
                                 --bare-attributes --json FILE]
  Completed invocations per second against a bare echo workflow (docs/BENCHMARKS.md,
  "Throughput"); --json writes the result to FILE.`;

const BODY = Buffer.alloc(1024, 'b');
const ECHO_QUEUE = 'bench-echo';
/** How long after a 202 the load generator first asks for the call's workflow (see acceptedResult). */
const FIRST_ASK_MS = 50;

const say = (line = '') => process.stdout.write(line + '\n');
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;

/** One call end to end; resolves with the id it completed (for the row check), throws on any failure. */
type Call = () => Promise<string>;
type Window = {
  latencies: number[];
  ids: string[];
  errors: number;
  seconds: number;
  cpuMs: Map<string, number>;
  completedAll: number;
};

/**
 * `concurrency` loops calling back to back; counts what completes between `settle` and
 * `settle + seconds` after the start, then waits for the calls still running (not counted).
 */
async function measure(
  call: Call,
  concurrency: number,
  settleS: number,
  seconds: number,
  cpu: CpuGroups = {},
): Promise<Window> {
  const cpuBefore = await cpuSnapshot(cpu);
  const started = performance.now();
  const opens = started + settleS * 1000;
  const closes = opens + seconds * 1000;
  const window: Window = { latencies: [], ids: [], errors: 0, seconds, cpuMs: new Map(), completedAll: 0 };
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < closes) {
        const t0 = performance.now();
        try {
          const id = await call();
          const t1 = performance.now();
          window.completedAll++;
          if (t1 >= opens && t1 < closes) {
            window.latencies.push(t1 - t0);
            window.ids.push(id);
          }
        } catch {
          const t1 = performance.now();
          if (t1 >= opens && t1 < closes) window.errors++;
        }
      }
    }),
  );
  window.cpuMs = cpuBetween(cpuBefore, await cpuSnapshot(cpu));
  return window;
}

function merge(windows: Window[]) {
  const latencies = windows.flatMap((w) => w.latencies).sort((a, b) => a - b);
  const seconds = windows.reduce((a, w) => a + w.seconds, 0);
  // CPU per completed call: everything the processes used while the loops ran, over every call they completed.
  const completedAll = windows.reduce((a, w) => a + w.completedAll, 0);
  const cpuPerCall = new Map<string, number>();
  for (const w of windows)
    for (const [name, ms] of w.cpuMs) cpuPerCall.set(name, (cpuPerCall.get(name) ?? 0) + ms / completedAll);
  return {
    rate: latencies.length / seconds,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    n: latencies.length,
    errors: windows.reduce((a, w) => a + w.errors, 0),
    ids: windows.flatMap((w) => w.ids),
    cpuPerCall,
  };
}

export async function runThroughputBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      concurrency: { type: 'string', default: '16' },
      seconds: { type: 'string', default: '15' },
      rounds: { type: 'string', default: '2' },
      warmup: { type: 'string', default: '5' },
      settle: { type: 'string', default: '2' },
      /** Write CPU profiles of the gateway API, the gateway worker and the echo worker into this directory. */
      profile: { type: 'string' },
      /**
       * Diagnostic, not the baseline: the bare workflow also carries the gateway's search
       * attributes (set at start, upserted before and after the activity), to see what they cost.
       */
      'bare-attributes': { type: 'boolean', default: false },
    },
  });
  const CONCURRENCY = Number(args.concurrency);
  const SECONDS = Number(args.seconds);
  const ROUNDS = Number(args.rounds);
  const WARMUP = Number(args.warmup);
  const SETTLE = Number(args.settle);
  const setup = `${CONCURRENCY} concurrent callers per target, ${ROUNDS} rounds × ${SECONDS} s windows (opened ${SETTLE} s after the loops start), ${WARMUP} s warm-up each, 1 KiB bodies${args['bare-attributes'] ? "; DIAGNOSTIC: the bare workflow carries the gateway's search attributes" : ''}`;
  const result = startResult(
    'throughput',
    `npm run bench:throughput -- ${argv.join(' ')}`.trim().replace(/ --$/, ''),
    setup,
  );
  const children: ChildProcess[] = [];
  const child = (args: string[], env?: NodeJS.ProcessEnv) => spawnInto(children, args, env);
  let infra: Infra | undefined;
  let temporal: Client | undefined;
  const dataDir = join(tmpdir(), `gw-bench-throughput-${process.pid}`);
  try {
    say(`# throughput benchmark: ${setup}`);
    infra = await startBenchInfra('throughput', dataDir);

    const upstream = child(['bench/proxy-servers.ts', 'upstream']);
    const upstreamUrl = `http://127.0.0.1:${await listeningPort(upstream)}`;
    const apiPort = await freePort();
    const env = gatewayEnvironment(infra, apiPort);
    const profile = (name: string) =>
      args.profile ? ['--cpu-prof', `--cpu-prof-dir=${args.profile}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
    const gateway = child([...profile('api'), 'api/main.ts'], env);
    const gatewayWorker = child([...profile('gateway-worker'), 'temporal/gateway-worker-main.ts'], env);
    const echoWorker = child([...profile('echo-worker'), 'bench/echo-worker.ts', infra.temporalAddress, ECHO_QUEUE]);
    // Warnings and errors only: the workers' INFO lines (bundling, state changes) are noise here.
    for (const [name, c] of [
      ['gateway', gateway],
      ['worker', gatewayWorker],
      ['echo worker', echoWorker],
    ] as const) {
      createInterface({ input: c.stderr! }).on('line', (line) => {
        if (!/\[INFO\]|^\s|^(asset|orphan|runtime|cacheable|optional|webpack|\.\/)/.test(line))
          process.stderr.write(`[${name}] ${line}\n`);
      });
    }
    const apiUrl = `http://127.0.0.1:${apiPort}`;

    const { tenant, auth, agent } = await createBenchAgent(apiUrl, infra, upstreamUrl);

    temporal = await connectClient(infra.temporalAddress, 'default');
    const client = temporal;
    // The 202 follows the accept commit and the workflow start travels beside it (docs/PROXY.md):
    // right after a 202 the workflow may not exist yet (a start takes a few ms on a quiet machine,
    // tens of ms with the stack CPU-bound). So the first ask for its result waits FIRST_ASK_MS,
    // and an ask that finds no workflow yet is repeated after a doubling wait, as a client told
    // that the start follows the 202 would ask; asking at once and every 5 ms made ~1.3 asks per
    // call that Temporal answered "not found" (~1 ms of its CPU each). Those early asks are
    // Temporal work the bare path does not cause (its start is awaited): counted, and reported
    // beside the CPU.
    let earlyAsks = 0;
    let asked = 0;
    const acceptedResult = async (id: string): Promise<unknown> => {
      asked++;
      await sleep(FIRST_ASK_MS);
      for (let wait = FIRST_ASK_MS, until = Date.now() + 10_000; ; wait = Math.min(wait * 2, 200)) {
        try {
          return await client.workflow.getHandle(id).result();
        } catch (err) {
          if ((err as Error).name !== 'WorkflowNotFoundError' || Date.now() > until) throw err;
          earlyAsks++;
          await sleep(wait);
        }
      }
    };
    const api = new Pool(apiUrl, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 30_000 });
    const gatewayCall: Call = async () => {
      const res = await api.request({
        path: `/v1/proxy/${agent.id}`,
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/octet-stream' },
        body: BODY,
      });
      const accepted = (await res.body.json()) as { invocation_id?: string };
      if (res.statusCode !== 202 || !accepted.invocation_id)
        throw new Error(`transactional answered ${res.statusCode}`);
      const outcome = (await acceptedResult(accepted.invocation_id)) as InvocationOutcome;
      if (outcome.status !== 'succeeded') throw new Error(`invocation ${outcome.status} (${outcome.errorClass})`);
      return accepted.invocation_id;
    };
    const echoBody = BODY.toString();
    const bareCall: Call = async () => {
      const workflowId = `bench-echo-${randomUUID()}`;
      const handle = await client.workflow.start('EchoWorkflow', {
        taskQueue: ECHO_QUEUE,
        workflowId,
        args: [{ url: `${upstreamUrl}/agent`, body: echoBody, upserts: args['bare-attributes'] }],
        ...(args['bare-attributes']
          ? {
              typedSearchAttributes: [
                { key: TenantId, value: tenant },
                { key: AgentId, value: agent.id },
                { key: InvocationStatus, value: 'pending' },
              ],
              staticSummary: `bench (${agent.id})`,
            }
          : {}),
      });
      const status = (await handle.result()) as number;
      if (status !== 200) throw new Error(`echo answered ${status}`);
      return workflowId;
    };
    const targets = [
      { name: 'bare echo workflow (client start → result)', call: bareCall },
      { name: 'gateway: POST /v1/proxy/{id} → 202 → workflow completed, row succeeded', call: gatewayCall },
    ];

    // Both workers bundle their workflows on start: the first call of each waits for that.
    await timedStep('throughput: first completions', 'the workers bundle their workflows', async () => {
      for (const t of targets)
        await waitFor(`first completion: ${t.name}`, async () => Boolean(await t.call()), 180_000);
    });
    await timedStep('throughput: warm-up', `${WARMUP} s per target`, async () => {
      for (const t of targets) await measure(t.call, CONCURRENCY, 0, WARMUP); // JIT, pools, workflow caches
    });
    // Where the CPU goes, per process: the Temporal server found by its port, PostgreSQL as the
    // backends connected to the bench database (the server may be shared with other work).
    const temporalPort = infra.temporalAddress.split(':').at(-1)!;
    const database = await databaseBackends(infra.databaseUrl);
    const cpu: CpuGroups = {
      'gateway API': () => [gateway.pid!],
      'gateway worker': () => [gatewayWorker.pid!],
      'echo worker': () => [echoWorker.pid!],
      'Temporal server': () => findPids('start-dev', `--port ${temporalPort}`),
      'PostgreSQL (bench database backends)': database.pids,
      upstream: () => [upstream.pid!],
      'load generator (this process)': () => [process.pid],
    };
    const windows = new Map(targets.map((t) => [t.name, [] as Window[]]));
    const rounds = startStep('throughput: measuring', `${ROUNDS} rounds × ${targets.length} targets × ${SECONDS} s`);
    for (let round = 0; round < ROUNDS; round++) {
      for (const t of targets) windows.get(t.name)!.push(await measure(t.call, CONCURRENCY, SETTLE, SECONDS, cpu));
      rounds.progress(round + 1, ROUNDS, 'rounds');
    }
    rounds.end();
    await database.end();
    await api.close();
    const [bare, gw] = targets.map((t) => merge(windows.get(t.name)!));

    // Every counted gateway completion must be a `succeeded` row.
    const db = new pg.Client({ connectionString: infra.databaseUrl });
    await db.connect();
    const { rows } = await db.query<{ n: number }>(
      `select count(*)::int as n from invocations where id = any($1) and status = 'succeeded'`,
      [gw.ids],
    );
    await db.end();
    if (rows[0].n !== gw.ids.length)
      throw new Error(`${gw.ids.length} completions counted, but ${rows[0].n} rows are succeeded`);

    const table = {
      title: `transactional invocations completed end to end, ${CONCURRENCY} concurrent callers, ${ROUNDS} × ${SECONDS} s windows each, interleaved`,
      header: ['path', 'completions/s', 'p50 end to end', 'p99 end to end', 'completions', 'errors'],
      rows: [bare, gw].map((r, i) => [
        targets[i].name,
        `${r.rate.toFixed(1)}/s`,
        fmt(r.p50),
        fmt(r.p99),
        String(r.n),
        String(r.errors),
      ]),
    };
    result.tables.push(table);
    const cpuTable = {
      title: 'CPU per completed call, by process (ms; user + system, while the loops ran)',
      header: ['process', 'bare echo workflow', 'gateway', 'difference'],
      rows: [...gw.cpuPerCall.keys()].map((name) => {
        const [b, g] = [bare.cpuPerCall.get(name) ?? 0, gw.cpuPerCall.get(name) ?? 0];
        return [name, b.toFixed(2), g.toFixed(2), `${g - b >= 0 ? '+' : ''}${(g - b).toFixed(2)}`];
      }),
    };
    const total = (m: Map<string, number>) => [...m.values()].reduce((a, v) => a + v, 0);
    cpuTable.rows.push([
      'total',
      total(bare.cpuPerCall).toFixed(2),
      total(gw.cpuPerCall).toFixed(2),
      `+${(total(gw.cpuPerCall) - total(bare.cpuPerCall)).toFixed(2)}`,
    ]);
    result.tables.push(cpuTable);
    const ratio = gw.rate / bare.rate;
    result.checks.push(
      {
        figure: `completed invocations/s, c=${CONCURRENCY}`,
        measured: `${gw.rate.toFixed(1)}/s`,
        baseline: `bare echo workflow ${bare.rate.toFixed(1)}/s`,
        ratio: `${(ratio * 100).toFixed(0)} %`,
        target: '≥ 90 % of the bare echo workflow',
        pass: ratio >= 0.9,
      },
      {
        figure: `p50 end-to-end completion, c=${CONCURRENCY}`,
        measured: fmt(gw.p50),
        baseline: `bare echo workflow ${fmt(bare.p50)}`,
        ratio: `${(gw.p50 / bare.p50).toFixed(2)}×`,
        target: '(none)',
        pass: null,
      },
    );
    result.notes.push(`every counted gateway completion checked in PostgreSQL: ${rows[0].n} rows succeeded`);
    result.notes.push(
      `the load generator asked Temporal for a gateway call's result before its workflow existed ${(earlyAsks / asked).toFixed(2)} times per call (first asked ${FIRST_ASK_MS} ms after the 202, then after doubling waits; in the Temporal server's CPU of the gateway column)`,
    );
    say();
    for (const line of tableLines(table, '## ')) say(line);
    say();
    for (const line of tableLines(cpuTable, '## ')) say(line);
    say();
    say(`rows checked: ${rows[0].n} of ${gw.ids.length} counted completions are succeeded`);
    say(result.notes.at(-1)!);
    say(
      `ratio: throughput ${(ratio * 100).toFixed(0)} % of the bare echo workflow, p50 ${(gw.p50 / bare.p50).toFixed(2)}×`,
    );
    say(`target: ≥ 90 % of the bare echo workflow → ${ratio >= 0.9 ? 'met' : 'MISSED'}`);
  } finally {
    await temporal?.connection.close().catch(() => undefined);
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runThroughputBench);
