// `npm run bench:proxy [-- --concurrency 1,8 --seconds 5 --rounds 3 --starts 200 --streams 20 --stream-mib 32]`
//
// The proxy's overhead on loopback, every figure next to its baseline, in one run:
// 1. Streaming, 1 KiB bodies at fixed concurrency: latency p50/p99 and throughput calling the
//    upstream directly, through a bare undici pass-through proxy, and through the gateway's
//    POST /v1/proxy/{id}/stream (auth, agent lookup, rate limit, stages, row written and
//    completed) on its invoke fast path and through the routers, and once more with the analytics
//    rollups kept by the row-level triggers the batched fold replaced (bench/analytics-modes.ts);
//    CPU per call by process beside each. Targets are measured round-robin in several rounds so
//    drift hits all alike.
//    (What a matching budget adds is its own benchmark: bench/budget.ts.)
// 2. Transactional: the 202 of POST /v1/proxy/{id} (body, row and intent to start committed;
//    the workflow started after the answer) against a bare `client.workflow.start` on the same
//    Temporal server.
// 3. Memory: the gateway's RSS while N streams of M MiB each pass through both ways at once.
// Upstream, bare proxy and gateway API are separate processes; the load comes from this one.
// Infrastructure (Temporal, PostgreSQL, ...) is started as for the tests and removed after.
// `npm run bench` (bench/run.ts) calls runProxyBench and puts its result in docs/BENCHMARKS.md.
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { timedStep } from '../scripts/lib/progress.ts';
import { parseCommand } from '../scripts/lib/cli.ts';
import type { CpuGroups } from './cpu.ts';
import { databaseBackends } from './database-cpu.ts';
import { analyticsModes } from './analytics-modes.ts';
import { say } from './print.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { load, type Target } from './proxy-load.ts';
import { runMemory, type StreamMemory } from './proxy-memory.ts';
import { DATABASE, ROW_TRIGGERS_TARGET, runStreaming } from './proxy-streaming.ts';
import { runTransactional, type StartTimes } from './proxy-transactional.ts';
import { finishResult, runAsMain, startResult, type BenchResult } from './result.ts';
import { createBenchAgent, gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';

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
    const database = await databaseBackends(infra.databaseUrl);
    const analytics = await analyticsModes(infra.databaseUrl);
    const folding = { prepare: analytics.fold, settle: analytics.settle };
    const cpu: CpuGroups = {
      'gateway API': () => [gateway.pid!],
      'bare proxy': () => [bare.pid!],
      upstream: () => [upstream.pid!],
      [DATABASE]: database.pids,
      'load generator (this process)': () => [process.pid],
    };

    // 1. Streaming, at each concurrency.
    const targets: Target[] = [
      { name: 'direct', origin: upstreamUrl, path: '/agent', headers: {} },
      { name: 'bare proxy', origin: bareUrl, path: '/agent', headers: {} },
      { name: 'gateway', origin: apiUrl, path: `/v1/proxy/${agent.id}/stream`, headers: auth, ...folding },
      // The same endpoint behind a trailing slash, which the invoke fast path leaves to the routers: what
      // the general middleware stack costs, measured in the same process and rounds.
      {
        name: 'gateway via the routers',
        origin: apiUrl,
        path: `/v1/proxy/${agent.id}/stream/`,
        headers: auth,
        ...folding,
      },
      // The gateway as it was before the analytics fold: the rollups kept by row-level triggers
      // in every completing transaction (bench/analytics-modes.ts).
      {
        name: ROW_TRIGGERS_TARGET,
        origin: apiUrl,
        path: `/v1/proxy/${agent.id}/stream`,
        headers: auth,
        prepare: analytics.rowTriggers,
      },
    ];
    await timedStep('proxy: warm-up', '1 s per target', async () => {
      for (const t of targets) await load(t, 1, Math.max(...CONCURRENCIES)); // JIT, pools, caches
    });
    const streamingTargets = PARTS.has('streaming')
      ? await runStreaming(targets, { concurrencies: CONCURRENCIES, rounds: ROUNDS, seconds: SECONDS, cpu }, result)
      : [];
    await database.end();
    await analytics.fold();
    await analytics.end();
    let tx: StartTimes | undefined;
    let bs: StartTimes | undefined;
    let gwMem: StreamMemory | undefined;
    if (PARTS.has('transactional')) {
      // 2. Transactional 202 vs a bare workflow start, sequential, interleaved.
      ({ tx, bs } = await runTransactional(
        { temporalAddress: infra.temporalAddress, apiUrl, auth, tenant, agentId: agent.id, starts: STARTS },
        result,
      ));
    }
    if (PARTS.has('memory')) {
      // 3. Memory under big streams, the bare proxy alongside for reference.
      gwMem = await runMemory(
        { url: `${bareUrl}/agent`, headers: {}, pid: bare.pid! },
        { url: `${apiUrl}/v1/proxy/${agent.id}/stream`, headers: auth, pid: gateway.pid! },
        { streams: STREAMS, streamBytes: STREAM_BYTES },
        result,
      );
    }
    const check = (ok: boolean) => (ok ? 'met' : 'MISSED');
    say();
    say(`## targets`);
    for (const line of streamingTargets) say(line);
    if (tx && bs) {
      say(`- 202 p50 ≤ 0.8× bare start: ${(tx.p50 / bs.p50).toFixed(2)}× → ${check(tx.p50 <= 0.8 * bs.p50)}`);
      say(`- 202 p99 ≤ 1.0× bare start: ${(tx.p99 / bs.p99).toFixed(2)}× → ${check(tx.p99 <= bs.p99)}`);
    }
    const rss = gwMem && result.checks.find((c) => c.figure === 'RSS growth, gateway');
    if (rss) say(`- RSS growth ${rss.target}: ${rss.measured} (${rss.baseline}) → ${check(rss.pass === true)}`);
  } finally {
    // Children are stopped gracefully first (a CPU profile is written on exit).
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runProxyBench);
