// `npm run bench:proxy [-- --concurrency 1,8 --seconds 5 --rounds 3 --starts 200 --streams 20 --stream-mib 32]`
//
// The proxy's overhead on loopback, every figure next to its baseline, in one run:
// 1. Streaming, 1 KiB bodies at fixed concurrency: latency p50/p99 and throughput calling the
//    upstream directly, through a bare undici pass-through proxy, and through the gateway's
//    POST /v1/proxy/{id}/stream (auth, agent lookup, rate limit, stages, row written and
//    completed) on its lean path and through the routers; CPU per call by process beside each.
//    Targets are measured round-robin in several rounds so drift hits all alike.
// 2. Transactional: the 202 of POST /v1/proxy/{id} (body, row and intent to start committed;
//    the workflow started after the answer) against a bare `client.workflow.start` on the same
//    Temporal server.
// 3. Memory: the gateway's RSS while N streams of M MiB each pass through both ways at once.
// Upstream, bare proxy and gateway API are separate processes; the load comes from this one.
// Infrastructure (Temporal, PostgreSQL, ...) is started as for the tests and removed after.
// `npm run bench` (bench/run.ts) calls runProxyBench and puts its result in docs/BENCHMARKS.md.
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import pg from 'pg';
import { Pool, request } from 'undici';
import { cpuBetween, cpuSnapshot, type CpuGroups } from './cpu.ts';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { startStep, timedStep } from '../scripts/lib/progress.ts';
import { connectClient } from '../temporal/client.ts';
import { AgentId, InvocationStatus, TenantId } from '../temporal/search-attributes.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { createBenchAgent, gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';
import { finishResult, runAsMain, startResult, type BenchResult, percentile } from './result.ts';
import { parseCommand } from '../scripts/lib/cli.ts';

const USAGE = `usage: npm run bench:proxy [-- --concurrency 1,8 --seconds 5 --rounds 3 --starts 200 --streams 20 --stream-mib 32
                            --profile DIR --node-flags FLAGS --only streaming,transactional,memory --json FILE]
  The proxy's overhead against a bare proxy and a bare workflow start, and RSS under N streams
  (docs/BENCHMARKS.md, "Proxy"); --json writes the result to FILE.`;

const parseOptions = (argv: string[]) =>
  parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      /** One or more fixed concurrencies (comma-separated); the streaming comparison runs at each. */
      concurrency: { type: 'string', default: '1,8' },
      seconds: { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      starts: { type: 'string', default: '200' },
      streams: { type: 'string', default: '20' },
      'stream-mib': { type: 'string', default: '32' },
      /** Write a CPU profile of the gateway process into this directory (for finding hot spots). */
      profile: { type: 'string' },
      /** Node flags for the gateway process alone (space-separated), to measure their effect. */
      'node-flags': { type: 'string', default: '' },
      /** Run only these parts (comma-separated: streaming, transactional, memory). */
      only: { type: 'string', default: 'streaming,transactional,memory' },
    },
  });
const BODY = Buffer.alloc(1024, 'b');

const say = (line = '') => process.stdout.write(line + '\n');
const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

type Target = { name: string; origin: string; path: string; headers: Record<string, string> };
type Sample = { latencies: number[]; completed: number; errors: number; seconds: number; cpuMs: Map<string, number> };

/**
 * `concurrency` loops, each sending the next request as soon as its previous answer is read;
 * the CPU each group of `cpu` used meanwhile comes with the sample.
 */
async function load(target: Target, seconds: number, concurrency: number, cpu: CpuGroups = {}): Promise<Sample> {
  const cpuBefore = await cpuSnapshot(cpu);
  const pool = new Pool(target.origin, { connections: concurrency, pipelining: 1, keepAliveTimeout: 30_000 });
  const latencies: number[] = [];
  let errors = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        try {
          const res = await pool.request({
            path: target.path,
            method: 'POST',
            headers: { 'content-type': 'application/octet-stream', ...target.headers },
            body: BODY,
          });
          await res.body.arrayBuffer();
          if (res.statusCode !== 200) errors++;
          else latencies.push(performance.now() - t0);
        } catch {
          errors++;
        }
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  const cpuMs = cpuBetween(cpuBefore, await cpuSnapshot(cpu));
  await pool.close();
  return { latencies, completed: latencies.length, errors, seconds: elapsed, cpuMs };
}

function merge(samples: Sample[]) {
  const all = samples.flatMap((s) => s.latencies).sort((a, b) => a - b);
  const completed = samples.reduce((a, s) => a + s.completed, 0);
  const seconds = samples.reduce((a, s) => a + s.seconds, 0);
  // CPU milliseconds per completed call, by process group.
  const cpuPerCall = new Map<string, number>();
  for (const s of samples)
    for (const [name, ms] of s.cpuMs) cpuPerCall.set(name, (cpuPerCall.get(name) ?? 0) + ms / Math.max(1, completed));
  return {
    p50: percentile(all, 0.5),
    p99: percentile(all, 0.99),
    rps: completed / seconds,
    errors: samples.reduce((a, s) => a + s.errors, 0),
    n: all.length,
    cpuPerCall,
  };
}

/** The targets of the streaming comparison: tighter at c=1, where nothing queues. */
function streamingGoals(concurrency: number) {
  return concurrency <= 1 ? { p50: 0.3, p99: 1.5, share: 0.8 } : { p50: 1, p99: 3, share: 0.6 };
}

function summarize(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    mean: values.reduce((a, b) => a + b, 0) / values.length,
  };
}

/** `STREAMS` concurrent streams of STREAM_BYTES up through `url`, echoed back down; returns the peak RSS growth of `pid`. */
async function memoryUnderStreams(
  url: string,
  headers: Record<string, string>,
  pid: number,
  STREAMS: number,
  STREAM_BYTES: number,
): Promise<{ baseline: number; peak: number; seconds: number }> {
  const chunk = Buffer.alloc(64 * 1024, 'm');
  const baseline = rssMiB(pid);
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 25);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: STREAMS }, async () => {
      const body = Readable.from(
        (function* () {
          for (let sent = 0; sent < STREAM_BYTES; sent += chunk.length) yield chunk;
        })(),
      );
      const res = await request(url, { method: 'POST', headers: { ...headers, 'x-echo': '1' }, body });
      let got = 0;
      for await (const c of res.body) got += c.length;
      if (got !== STREAM_BYTES) throw new Error(`stream returned ${got} of ${STREAM_BYTES} bytes`);
    }),
  );
  clearInterval(sampler);
  return { baseline, peak, seconds: (performance.now() - started) / 1000 };
}

export async function runProxyBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseOptions(argv);
  const CONCURRENCIES = args.concurrency.split(',').map(Number);
  const PARTS = new Set(args.only.split(','));
  const SECONDS = Number(args.seconds);
  const ROUNDS = Number(args.rounds);
  const STARTS = Number(args.starts);
  const STREAMS = Number(args.streams);
  const STREAM_BYTES = Number(args['stream-mib']) * 1024 * 1024;
  const children: ChildProcess[] = [];
  const child = (args: string[], env?: NodeJS.ProcessEnv) => spawnInto(children, args, env);
  const setup = `concurrency ${CONCURRENCIES.join(' and ')}, ${ROUNDS} rounds × ${SECONDS} s per target, 1 KiB bodies; ${STARTS} transactional starts; ${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB`;
  const result = startResult('proxy', `npm run bench:proxy -- ${argv.join(' ')}`.trim().replace(/ --$/, ''), setup);
  let infra: Infra | undefined;
  const dataDir = join(tmpdir(), `gw-bench-proxy-${process.pid}`);
  try {
    say(`# proxy benchmark: ${setup}`);
    infra = await startBenchInfra('proxy', dataDir);

    const upstream = child(['bench/proxy-servers.ts', 'upstream']);
    const upstreamUrl = `http://127.0.0.1:${await listeningPort(upstream)}`;
    const bare = child(['bench/proxy-servers.ts', 'bare', `${upstreamUrl}/agent`]);
    const bareUrl = `http://127.0.0.1:${await listeningPort(bare)}`;
    const apiPort = await freePort();
    const gateway = child(
      [
        ...args['node-flags'].split(' ').filter(Boolean),
        ...(args.profile ? ['--cpu-prof', `--cpu-prof-dir=${args.profile}`] : []),
        'api/main.ts',
      ],
      gatewayEnvironment(infra, apiPort),
    );
    gateway.stderr!.on('data', (d: Buffer) => process.stderr.write(`[gateway] ${d}`));
    const apiUrl = `http://127.0.0.1:${apiPort}`;

    const { tenant, auth, agent } = await createBenchAgent(apiUrl, infra, upstreamUrl);
    // Where the CPU goes, per process: PostgreSQL as the backends connected to the bench
    // database (the server may be shared with other work); this process is the load.
    const databaseName = new URL(infra.databaseUrl).pathname.slice(1);
    const pgProbe = new pg.Client({ connectionString: infra.databaseUrl });
    await pgProbe.connect();
    const cpu: CpuGroups = {
      'gateway API': () => [gateway.pid!],
      'bare proxy': () => [bare.pid!],
      upstream: () => [upstream.pid!],
      'PostgreSQL (bench database backends)': async () =>
        (
          await pgProbe.query<{ pid: number }>(
            'select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
            [databaseName],
          )
        ).rows.map((r) => r.pid),
      'load generator (this process)': () => [process.pid],
    };

    // 1. Streaming, at each concurrency.
    const targets: Target[] = [
      { name: 'direct', origin: upstreamUrl, path: '/agent', headers: {} },
      { name: 'bare proxy', origin: bareUrl, path: '/agent', headers: {} },
      { name: 'gateway', origin: apiUrl, path: `/v1/proxy/${agent.id}/stream`, headers: auth },
      // The same endpoint behind a trailing slash, which the lean path leaves to the routers: what
      // the general middleware stack costs, measured in the same process and rounds.
      { name: 'gateway via the routers', origin: apiUrl, path: `/v1/proxy/${agent.id}/stream/`, headers: auth },
    ];
    await timedStep('proxy: warm-up', '1 s per target', async () => {
      for (const t of targets) await load(t, 1, Math.max(...CONCURRENCIES)); // JIT, pools, caches
    });
    const streamingTargets: string[] = [];
    for (const concurrency of PARTS.has('streaming') ? CONCURRENCIES : []) {
      const samples = new Map<string, Sample[]>(targets.map((t) => [t.name, []]));
      const streamingStep = startStep(
        `proxy: streaming at concurrency ${concurrency}`,
        `${ROUNDS} rounds × ${targets.length} targets × ${SECONDS} s`,
      );
      for (let round = 0; round < ROUNDS; round++) {
        for (const t of targets) samples.get(t.name)!.push(await load(t, SECONDS, concurrency, cpu));
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
      say(`| ${cpuTable.header.join(' | ')} |`);
      say(`|${cpuTable.header.map(() => '---').join('|')}|`);
      for (const row of cpuTable.rows) say(`| ${row.join(' | ')} |`);
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
    await pgProbe.end();

    let tx: ReturnType<typeof summarize> | undefined;
    let bs: ReturnType<typeof summarize> | undefined;
    let gwMem: Awaited<ReturnType<typeof memoryUnderStreams>> | undefined;
    if (PARTS.has('transactional')) {
      // 2. Transactional 202 vs a bare workflow start, sequential, interleaved.
      const temporal = await connectClient(infra.temporalAddress, 'default');
      const gatewayStarts: number[] = [];
      const bareStarts: number[] = [];
      const txPool = new Pool(apiUrl, { connections: 1 });
      const startOnce = async () => {
        const t0 = performance.now();
        // The same start the gateway makes: same workflow, search attributes and summary.
        await temporal.workflow.start('InvocationWorkflow', {
          taskQueue: 'bench-bare-start',
          workflowId: `bench-${randomUUID()}`,
          args: [{ invocationId: 'bench', tenantId: tenant, agentId: agent.id }],
          typedSearchAttributes: [
            { key: TenantId, value: tenant },
            { key: AgentId, value: agent.id },
            { key: InvocationStatus, value: 'pending' },
          ],
          staticSummary: `bench (${agent.id})`,
        });
        return performance.now() - t0;
      };
      const acceptOnce = async () => {
        const t0 = performance.now();
        const res = await txPool.request({
          path: `/v1/proxy/${agent.id}`,
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/octet-stream' },
          body: BODY,
        });
        await res.body.dump();
        if (res.statusCode !== 202) throw new Error(`transactional answered ${res.statusCode}`);
        return performance.now() - t0;
      };
      const startsStep = startStep('proxy: transactional starts', `20 warm-ups, then ${STARTS} of each, interleaved`);
      for (let i = 0; i < 20; i++) {
        await startOnce();
        await acceptOnce();
      }
      for (let i = 0; i < STARTS; i++) {
        bareStarts.push(await startOnce());
        gatewayStarts.push(await acceptOnce());
        startsStep.progress(i + 1, STARTS, 'starts');
      }
      startsStep.end();
      await txPool.close();
      await temporal.connection.close();
      tx = summarize(gatewayStarts);
      bs = summarize(bareStarts);
      say();
      say(`## transactional 202 vs bare workflow.start (sequential, ${STARTS} each, interleaved)`);
      say(`| path | p50 | p99 | mean |`);
      say(`|---|---|---|---|`);
      say(`| bare client.workflow.start | ${fmt(bs.p50)} | ${fmt(bs.p99)} | ${fmt(bs.mean)} |`);
      say(`| POST /v1/proxy/{id} → 202 | ${fmt(tx.p50)} | ${fmt(tx.p99)} | ${fmt(tx.mean)} |`);
      say(`ratio p50 ${(tx.p50 / bs.p50).toFixed(2)}×, p99 ${(tx.p99 / bs.p99).toFixed(2)}×`);
      result.tables.push({
        title: `transactional 202 vs bare workflow.start (sequential, ${STARTS} each, interleaved)`,
        header: ['path', 'p50', 'p99', 'mean'],
        rows: [
          [
            'bare client.workflow.start (same workflow, search attributes, summary)',
            fmt(bs.p50),
            fmt(bs.p99),
            fmt(bs.mean),
          ],
          ['POST /v1/proxy/{id} → 202', fmt(tx.p50), fmt(tx.p99), fmt(tx.mean)],
        ],
      });
      result.checks.push(
        {
          figure: 'transactional 202 p50',
          measured: fmt(tx.p50),
          baseline: `bare start ${fmt(bs.p50)}`,
          ratio: `${(tx.p50 / bs.p50).toFixed(2)}×`,
          target: '≤ 0.8× the bare start',
          pass: tx.p50 <= 0.8 * bs.p50,
        },
        {
          figure: 'transactional 202 p99',
          measured: fmt(tx.p99),
          baseline: `bare start ${fmt(bs.p99)}`,
          ratio: `${(tx.p99 / bs.p99).toFixed(2)}×`,
          target: '≤ 1.0× the bare start',
          pass: tx.p99 <= 1.0 * bs.p99,
        },
      );
    }
    if (PARTS.has('memory')) {
      // 3. Memory under big streams, the bare proxy alongside for reference.
      const memoryStep = startStep(
        'proxy: memory',
        `${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB, bare proxy then gateway`,
      );
      const bareMem = await memoryUnderStreams(`${bareUrl}/agent`, {}, bare.pid!, STREAMS, STREAM_BYTES);
      gwMem = await memoryUnderStreams(
        `${apiUrl}/v1/proxy/${agent.id}/stream`,
        auth,
        gateway.pid!,
        STREAMS,
        STREAM_BYTES,
      );
      memoryStep.end();
      say();
      say(`## RSS while ${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB pass through (up and echoed down)`);
      say(`| process | baseline | peak | growth | wall time |`);
      say(`|---|---|---|---|---|`);
      say(
        `| bare proxy | ${bareMem.baseline.toFixed(0)} MiB | ${bareMem.peak.toFixed(0)} MiB | ${(bareMem.peak - bareMem.baseline).toFixed(1)} MiB | ${bareMem.seconds.toFixed(1)} s |`,
      );
      say(
        `| gateway | ${gwMem.baseline.toFixed(0)} MiB | ${gwMem.peak.toFixed(0)} MiB | ${(gwMem.peak - gwMem.baseline).toFixed(1)} MiB | ${gwMem.seconds.toFixed(1)} s |`,
      );
      const memRow = (name: string, m: typeof bareMem) => [
        name,
        `${m.baseline.toFixed(0)} MiB`,
        `${m.peak.toFixed(0)} MiB`,
        `${(m.peak - m.baseline).toFixed(1)} MiB`,
        `${m.seconds.toFixed(1)} s`,
      ];
      result.tables.push({
        title: `RSS while ${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB pass through (up and echoed down)`,
        header: ['process', 'baseline', 'peak', 'growth', 'wall time'],
        rows: [memRow('bare proxy', bareMem), memRow('gateway', gwMem)],
      });
      const growth = gwMem.peak - gwMem.baseline;
      const bareGrowth = bareMem.peak - bareMem.baseline;
      result.checks.push({
        figure: 'RSS growth, gateway',
        measured: `${growth.toFixed(1)} MiB`,
        baseline: `bare proxy ${bareGrowth.toFixed(1)} MiB`,
        ratio: `${(growth / bareGrowth).toFixed(2)}×`,
        target: '< 64 MiB',
        pass: growth < 64,
      });
    }
    const check = (ok: boolean) => (ok ? 'met' : 'MISSED');
    say();
    say(`## targets`);
    for (const line of streamingTargets) say(line);
    if (tx && bs) {
      say(`- 202 p50 ≤ 0.8× bare start: ${(tx.p50 / bs.p50).toFixed(2)}× → ${check(tx.p50 <= 0.8 * bs.p50)}`);
      say(`- 202 p99 ≤ 1.0× bare start: ${(tx.p99 / bs.p99).toFixed(2)}× → ${check(tx.p99 <= bs.p99)}`);
    }
    if (gwMem)
      say(
        `- RSS growth < 64 MiB: ${(gwMem.peak - gwMem.baseline).toFixed(1)} MiB → ${check(gwMem.peak - gwMem.baseline < 64)}`,
      );
  } finally {
    // Children are stopped gracefully first (a CPU profile is written on exit).
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runProxyBench);
