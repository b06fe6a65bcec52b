// `npm run bench:settle [-- --n 100 --warmup 10 --worker embedded|process --temporal-sqlite wal|default --keep]`
//
// /settle latency on anvil (automine: one block per transaction) against the reference: the
// `settle` function of the x402 npm package (coinbase's reference facilitator code) with a
// viem wallet client, run against the same anvil and token in the same run. Both settle fresh
// EIP-3009 authorizations of the same size one at a time, interleaved (ours, reference, ours,
// ...) so machine noise hits both alike.
//
// Ours is measured as a client sees it: POST /settle over HTTPS with mutual TLS (keep-alive),
// through the account lookup, readiness, the stored request, SettlementWorkflow on
// Temporal (re-verification with authorizationState and an eth_call simulation, guardrails
// and the nonce reservation in PostgreSQL, the signed transaction stored before it is sent,
// broadcast, first-block inclusion, the record). The facilitator runs as `npm start` runs it:
// its worker embedded, so /settle starts the workflow eagerly (--worker process runs the worker
// in a separate process instead, without eager start). Temporal is a dev server on a SQLite
// file in WAL mode with synchronous=normal (--temporal-sqlite default: the dev server's own
// rollback journal with a sync per commit, as `npm start` runs it today).
// The reference is a bare function call: no HTTP, no persistence, no dedupe, no limits.
// Then CPU per settle by process (bench/settle-cpu.ts), in blocks of N/2: ours, the reference,
// the reference, ours, each block of ours counted until its settlements' workflows have closed.
// `npm run bench` (bench/run.ts) calls runSettleBench and puts its result in docs/BENCHMARKS.md.
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join, resolve } from 'node:path';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { Agent, request } from 'undici';
import { Wallet, hexlify } from 'ethers';
import { createWalletClient, http, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import { settle as referenceSettle } from 'x402/facilitator';
import { appEnvironment, freeInfraPorts, startInfra } from '../scripts/lib/infra.ts';
import { canConnect, dropDatabase } from '../scripts/lib/postgres.ts';
import { freePort, waitFor } from '../scripts/lib/ports.ts';
import { ensureTool } from '../scripts/lib/tools.ts';
import { startStep } from '../scripts/lib/progress.ts';
import { ALL_SEARCH_ATTRIBUTES } from '../temporal/search-attributes.ts';
import { connectClient } from '../temporal/client.ts';
import { DEV_ACCOUNTS, fund } from '../scripts/dev/chain.ts';
import { loadFacilitatorConfig } from '../facilitator/config.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitator } from '../facilitator/db/migrations.ts';
import { startFacilitator } from '../facilitator-service/server.ts';
import { addAccount } from '../facilitator/accounts.ts';
import { issueClientCert } from '../scripts/dev/pki.ts';
import { loadKeystoreSigner } from '../facilitator/signer.ts';
import { createLogger } from '../lib/log.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../x402/schemes/exact/eip3009.ts';
import type { PaymentRequirements } from '../x402/schemas.ts';
import type { ExactPayment } from '../x402/schemes/exact/schemas.ts';
import { finishResult, runAsMain, startResult, tableLines, type BenchResult, percentile } from './result.ts';
import { findPids, type CpuGroups } from './cpu.ts';
import { databaseBackends } from './database-cpu.ts';
import { settleCpuTable } from './settle-cpu.ts';
import { parseCommand } from '../scripts/lib/cli.ts';

const USAGE = `usage: npm run bench:settle [-- --n 100 --warmup 10 --worker embedded|process --temporal-sqlite wal|default --keep --json FILE]
  /settle latency on anvil against the x402 reference settle (docs/BENCHMARKS.md, "Settlement");
  --json writes the result to FILE.`;

const AMOUNT = 10_000n;
const say = (line: string) => process.stdout.write(`${line}\n`);
const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
const fmt = (v: number) => v.toFixed(1).padStart(7);

export async function runSettleBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      n: { type: 'string', default: '100' },
      warmup: { type: 'string', default: '10' },
      worker: { type: 'string', default: 'embedded' },
      'temporal-sqlite': { type: 'string', default: 'wal' },
      keep: { type: 'boolean', default: false },
    },
  });
  const N = Number(args.n);
  const WARMUP = Number(args.warmup);
  const setup = `${N} settles each after ${WARMUP} warm-ups, interleaved; anvil automine; worker ${args.worker}; Temporal SQLite ${args['temporal-sqlite']}`;
  const result = startResult('settle', `npm run bench:settle -- ${argv.join(' ')}`.trim().replace(/ --$/, ''), setup);

  const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const dataDir = resolve('.data', `bench-settle-${runId}`);
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  const postgresUrl = process.env.DATABASE_URL ?? ((await canConnect(local)) ? local : undefined);

  const starting = startStep(
    'settle: starting the stack',
    `Temporal, PostgreSQL, anvil and the token; data in ${dataDir}`,
  );
  // Our own dev server, so its SQLite pragmas can be chosen; the same flags as scripts/dev/temporal-dev-server.ts otherwise.
  await mkdir(dataDir, { recursive: true });
  const temporalPort = await freePort();
  const temporalArgs = [
    'server',
    'start-dev',
    '--db-filename',
    join(dataDir, 'temporal.sqlite'),
    '--ip',
    '127.0.0.1',
    '--port',
    String(temporalPort),
    '--namespace',
    'default',
    '--headless',
    '--log-level',
    'error',
  ];
  for (const key of ALL_SEARCH_ATTRIBUTES) temporalArgs.push('--search-attribute', `${key.name}=Keyword`);
  if (args['temporal-sqlite'] === 'wal')
    temporalArgs.push('--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal');
  const temporalServer = spawn(ensureTool('temporal'), temporalArgs, { stdio: 'ignore' });
  const temporalAddress = `127.0.0.1:${temporalPort}`;
  await waitFor('temporal dev server', async () => {
    const c = await connectClient(temporalAddress, 'default');
    try {
      await c.workflowService.describeNamespace({ namespace: 'default' });
      return true;
    } finally {
      await c.connection.close();
    }
  });
  const infra = await startInfra({
    temporalAddress,
    dataDir,
    ports: await freeInfraPorts(),
    postgresUrl,
    databaseName: `bench_settle_${runId}`,
    namespace: 'default',
    persistChain: false,
    log: () => undefined,
  });
  starting.end();
  const cleanups: Array<() => Promise<unknown>> = [];
  cleanups.push(
    () =>
      new Promise((r) => {
        temporalServer.once('exit', r);
        temporalServer.kill('SIGTERM');
      }),
  );
  async function cleanup(): Promise<void> {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }

  try {
    // The environment npm start gives the facilitator (TLS, keystore, chain, databases), on free ports.
    const env: Record<string, string> = {
      ...appEnvironment(infra),
      FACILITATOR_PORT: '0',
      FACILITATOR_PUBLIC_PORT: '0',
      FACILITATOR_DEFAULT_DAILY_CEILING: String(10n ** 30n),
      FACILITATOR_EMBEDDED_WORKER: args.worker === 'embedded' ? 'true' : 'false',
      FACILITATOR_WORKER_METRICS_PORT: '0',
      LOG_LEVEL: 'silent',
    };
    const config = loadFacilitatorConfig(env);
    const pool = openFacilitatorPool(config.databaseUrl);
    cleanups.push(() => pool.end());
    await migrateFacilitator(pool);
    const embedded = args.worker === 'embedded';
    const temporal = embedded ? undefined : await connectClient(infra.temporalAddress, 'default');
    if (temporal) cleanups.push(() => temporal.connection.close());
    const facilitator = await startFacilitator(config, {
      pool,
      temporal,
      worker: embedded ? { signer: await loadKeystoreSigner(config) } : undefined,
      log: createLogger('facilitator', 'silent'),
    });
    cleanups.push(() => facilitator.close());

    let workerPid: number | undefined;
    if (!embedded) {
      const child = spawn(process.execPath, ['temporal/facilitator-worker-main.ts'], {
        env: { ...process.env, ...env, LOG_LEVEL: 'info' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      cleanups.push(
        () =>
          new Promise((r) => {
            child.once('exit', r);
            child.kill('SIGTERM');
          }),
      );
      await new Promise<void>((resolveReady, reject) => {
        createInterface({ input: child.stdout! }).on(
          'line',
          (line) => line.includes('facilitator worker running') && resolveReady(),
        );
        child.once('exit', (code) => reject(new Error(`facilitator worker exited (${code})`)));
      });
      workerPid = child.pid;
    }

    // Our client: a facilitator account with its own certificate, one keep-alive connection.
    const ca = { certPem: infra.pki.caCertPem, keyPem: await readFile(infra.pki.files.caKey, 'utf8') };
    const cert = await issueClientCert(ca, 'bench-gateway');
    await addAccount(pool, {
      name: 'bench',
      certPem: cert.certPem,
      allowedKinds: [{ network: 'base', asset: infra.tokenAddress }],
    });
    const dispatcher = new Agent({
      connect: { ca: infra.pki.caCertPem, cert: cert.certPem, key: cert.keyPem },
      connections: 1,
    });
    cleanups.push(() => dispatcher.close());

    // The reference: x402's settle with a viem wallet client on the same anvil (its gas wallet is
    // anvil dev account 3, which anvil funds).
    const referenceClient = createWalletClient({
      chain: base,
      transport: http(infra.chainRpcUrl),
      account: privateKeyToAccount(DEV_ACCOUNTS[3].privateKey),
    }).extend(publicActions);

    const payer = new Wallet(hexlify(randomBytes(32)));
    const payTo = new Wallet(hexlify(randomBytes(32))).address;
    await fund(infra.chainRpcUrl, infra.tokenAddress, payer.address, {
      usdc: AMOUNT * BigInt(2 * (2 * N + WARMUP) + 10),
    });
    const domain = { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: infra.tokenAddress };
    const requirements: PaymentRequirements = {
      scheme: 'exact',
      network: 'base',
      maxAmountRequired: String(AMOUNT),
      resource: 'https://gateway.bench/v1/proxy/agt_bench',
      description: 'bench',
      mimeType: 'application/json',
      payTo,
      maxTimeoutSeconds: 300,
      asset: infra.tokenAddress,
      extra: { name: 'USD Coin', version: '2' },
    };
    async function newPayment(): Promise<ExactPayment> {
      const now = Math.floor(Date.now() / 1000);
      const authorization = {
        from: payer.address,
        to: payTo,
        value: String(AMOUNT),
        validAfter: String(now - 600),
        validBefore: String(now + 300),
        nonce: hexlify(randomBytes(32)),
      };
      const signature = await payer.signTypedData(domain, TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
      return { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization } };
    }

    let oursSent = 0;
    async function ours(): Promise<number> {
      oursSent++;
      const body = JSON.stringify({
        x402Version: 1,
        paymentPayload: await newPayment(),
        paymentRequirements: requirements,
      });
      const t0 = performance.now();
      const res = await request(`${facilitator.url}/settle`, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json' },
        body,
      });
      const json = (await res.body.json()) as { success?: boolean };
      const elapsed = performance.now() - t0;
      if (res.statusCode !== 200 || !json.success)
        throw new Error(`our /settle answered ${res.statusCode} ${JSON.stringify(json)}`);
      return elapsed;
    }

    async function reference(): Promise<number> {
      const payment = await newPayment();
      const t0 = performance.now();
      const result = await referenceSettle(referenceClient as never, payment as never, requirements as never);
      const elapsed = performance.now() - t0;
      if (!result.success) throw new Error(`reference settle failed: ${result.errorReason}`);
      return elapsed;
    }

    const warming = startStep('settle: warm-up', `${WARMUP} settles each`);
    for (let i = 0; i < WARMUP; i++) {
      await ours();
      await reference();
    }
    warming.end();
    const measuring = startStep('settle: measuring', `${N} settles each, interleaved`);
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < N; i++) {
      a.push(await ours());
      b.push(await reference());
      measuring.progress(i + 1, N, 'settles');
    }
    measuring.end();

    // Where each side's CPU goes, by process (bench/settle-cpu.ts).
    const database = await databaseBackends(infra.facilitatorDatabaseUrl);
    cleanups.push(() => database.end());
    const watcher = await connectClient(infra.temporalAddress, 'default');
    cleanups.push(() => watcher.connection.close());
    const anvilPort = new URL(infra.chainRpcUrl).port;
    const groups: CpuGroups = {
      [embedded
        ? 'this process: the facilitator service and its worker, the reference, the client of both'
        : 'this process: the facilitator service, the reference, the client of both']: () => [process.pid],
      ...(workerPid ? { 'facilitator worker': () => [workerPid] } : {}),
      'Temporal server': () => (temporalServer.pid ? [temporalServer.pid] : []),
      // The trailing space: /proc's arguments end in one, and `--port 1234` must not match `--port 12345`.
      anvil: () => findPids('--chain-id', `--port ${anvilPort} `),
      'PostgreSQL (facilitator database backends)': database.pids,
    };
    const closed = 'WorkflowType="SettlementWorkflow" AND ExecutionStatus!="Running"';
    const cpuStep = startStep('settle: CPU per settle', `${N} of each, in blocks`);
    const cpuTable = await settleCpuTable({
      count: N - (N % 2),
      ours,
      reference,
      groups,
      // Every settlement of ours sent so far has a closed workflow. Visibility is written after
      // the answer, so "none running" could be true too early; polled every 50 ms, since the
      // wait is idle time in the block.
      settled: async () => {
        const deadline = Date.now() + 30_000;
        while ((await watcher.workflow.count(closed)).count < oursSent) {
          if (Date.now() > deadline) throw new Error('settlement workflows still open 30 s after their answers');
          await new Promise((r) => setTimeout(r, 50));
        }
      },
    });
    cpuStep.end();

    const row = (name: string, v: number[]) =>
      say(
        `${name.padEnd(34)} ${fmt(percentile(v, 0.5))} ${fmt(percentile(v, 0.95))} ${fmt(percentile(v, 0.99))} ${fmt(mean(v))}`,
      );
    say('');
    say(
      `/settle latency, ms (n=${N}, anvil automine, worker: ${args.worker}, Temporal SQLite: ${args['temporal-sqlite']})`,
    );
    say(`${''.padEnd(34)}     p50     p95     p99    mean`);
    row('ours: POST /settle (mTLS, durable)', a);
    row('reference: x402 settle()', b);
    const p50 = percentile(a, 0.5) / percentile(b, 0.5);
    const p95 = percentile(a, 0.95) / percentile(b, 0.95);
    say(`ratio ours/reference: p50 ${p50.toFixed(2)}x, p95 ${p95.toFixed(2)}x (target <= 1.2x)`);
    const ms = (v: number) => `${v.toFixed(1)} ms`;
    const cells = (v: number[]) => [
      ms(percentile(v, 0.5)),
      ms(percentile(v, 0.95)),
      ms(percentile(v, 0.99)),
      ms(mean(v)),
    ];
    result.tables.push({
      title: `/settle latency (n=${N}, anvil automine, worker: ${args.worker}, Temporal SQLite: ${args['temporal-sqlite']})`,
      header: ['path', 'p50', 'p95', 'p99', 'mean'],
      rows: [
        ['ours: POST /settle (mTLS, durable)', ...cells(a)],
        ['reference: x402 settle()', ...cells(b)],
      ],
    });
    result.tables.push(cpuTable);
    say('');
    for (const line of tableLines(cpuTable)) say(line);
    result.checks.push(
      {
        figure: '/settle p50',
        measured: ms(percentile(a, 0.5)),
        baseline: `x402 settle() ${ms(percentile(b, 0.5))}`,
        ratio: `${p50.toFixed(2)}×`,
        target: '≤ 1.2× the reference',
        pass: p50 <= 1.2,
      },
      {
        figure: '/settle p95',
        measured: ms(percentile(a, 0.95)),
        baseline: `x402 settle() ${ms(percentile(b, 0.95))}`,
        ratio: `${p95.toFixed(2)}×`,
        target: '≤ 1.2× the reference',
        pass: p95 <= 1.2,
      },
    );
  } finally {
    await cleanup();
    await infra.stop();
    await dropDatabase(infra.databaseUrl).catch(() => undefined);
    await dropDatabase(infra.facilitatorDatabaseUrl).catch(() => undefined);
    if (!args.keep) await rm(dataDir, { recursive: true, force: true });
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runSettleBench);
