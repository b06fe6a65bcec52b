// One isolated system per chaos scenario: its own data folder under .chaos-data/, free loopback
// ports, its own Temporal dev server, PostgreSQL (a database on the local server, or an embedded
// server of its own when the scenario must stop it), anvil and OpenBao (scripts/lib/infra.ts),
// the counting upstream and the application processes (processes.ts), so a scenario can kill
// any process and stop and start Temporal or PostgreSQL under them, and leaves nothing behind.
import { createWriteStream, mkdirSync, rmSync, type WriteStream } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Connection, Client } from '@temporalio/client';
import { appEnvironment, freeInfraPorts, startInfra, type Infra } from '../lib/infra.ts';
import { canConnect, dropDatabase } from '../lib/postgres.ts';
import { freePort } from '../lib/ports.ts';
import { startStep, timedStep } from '../lib/progress.ts';
import { mintToken } from '../lib/tokens.ts';
import { ensureDevAccount } from '../dev/facilitator-account.ts';
import { check } from './report.ts';
import { startCountingUpstream, type CountingUpstream } from './upstream.ts';
import { appProcesses, type AppName, type AppProcesses } from './processes.ts';

export type ChaosSystemOptions = {
  /** The scenario's name: its data folder and database names derive from it. */
  name: string;
  /** Start an embedded PostgreSQL of this system's own (needed to stop it); otherwise a database on the local server when one answers. */
  embeddedPostgres?: boolean;
  /** Which processes to run (default: api and worker). */
  apps?: AppName[];
  /** Extra environment for every application process. */
  env?: Record<string, string>;
  /** Upstream answer delay (ms) of the counting upstream. */
  upstreamDelayMs?: number;
};

export type ChaosSystem = {
  name: string;
  dataDir: string;
  infra: Infra;
  env: Record<string, string>;
  apiUrl: string;
  /** The worker's Prometheus endpoint (WORKER_METRICS_PORT). */
  workerMetricsUrl: string;
  facilitatorUrl: string;
  facilitatorPublicUrl: string;
  upstream: CountingUpstream;
  apps: AppProcesses['apps'];
  temporal: Client;
  /** A direct PostgreSQL connection for the scenario's checks (reads; re-created after a restart). */
  sql(text: string, params?: unknown[]): Promise<Array<Record<string, unknown>>>;
  token(tenant: string, user?: string): Promise<string>;
  /** SIGKILLs a process and waits for it to be gone. */
  kill(name: AppName): Promise<void>;
  /** Starts a process (again) and waits until it answers (API: /healthz; worker: a short settle time). */
  start(name: AppName): Promise<void>;
  stopTemporal(): Promise<void>;
  startTemporal(): Promise<void>;
  stopPostgres(): Promise<void>;
  startPostgres(): Promise<void>;
  /** Stops everything this system started and removes its data. */
  stop(): Promise<void>;
};

async function localPostgres(): Promise<string | undefined> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  return (await canConnect(local)) ? local : undefined;
}

// Systems still running, stopped in full when the runner forwards Ctrl-C or SIGTERM, so an
// interrupted scenario leaves no server or database behind.
const running = new Set<() => Promise<void>>();
function stopAllOnSignal(signal: NodeJS.Signals): void {
  void Promise.all([...running].map((stop) => stop().catch(() => undefined))).finally(() =>
    process.exit(signal === 'SIGINT' ? 130 : 143),
  );
}
process.once('SIGTERM', stopAllOnSignal);
process.once('SIGINT', stopAllOnSignal);

/** Writes each source's lines to `<dataDir>/logs/<source>.log`, and to stderr with CHAOS_VERBOSE. */
function systemLog(name: string, logDir: string) {
  mkdirSync(logDir, { recursive: true });
  const streams = new Map<string, WriteStream>();
  const verbose = Boolean(process.env.CHAOS_VERBOSE);
  return {
    log(source: string, line: string) {
      let stream = streams.get(source);
      if (!stream) streams.set(source, (stream = createWriteStream(join(logDir, `${source}.log`), { flags: 'a' })));
      stream.write(line.endsWith('\n') ? line : `${line}\n`);
      if (verbose) for (const l of line.split('\n')) if (l.trim()) process.stderr.write(`[${name}:${source}] ${l}\n`);
    },
    close() {
      for (const s of streams.values()) s.end();
    },
  };
}

/** The scenario's own connections for its checks: opened on first use, again after `end` (PostgreSQL restarted). */
function checksPool(databaseUrl: string) {
  let pool: pg.Pool | null = null;
  return {
    async query(text: string, params: unknown[] = []) {
      if (!pool) {
        pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
        pool.on('error', () => undefined);
      }
      return (await pool.query(text, params)).rows as Array<Record<string, unknown>>;
    },
    async end() {
      const ending = pool;
      pool = null;
      await ending?.end().catch(() => undefined);
    },
  };
}

export async function startSystem(opts: ChaosSystemOptions): Promise<ChaosSystem> {
  const runId = `${opts.name.replace(/[^a-z0-9]/gi, '_')}_${randomBytes(3).toString('hex')}`;
  const dataDir = resolve('.chaos-data', runId);
  const logDir = join(dataDir, 'logs');
  const logs = systemLog(opts.name, logDir);
  const log = logs.log;

  const cleanups: Array<() => Promise<unknown>> = [];
  const cleanup = async () => {
    running.delete(cleanup);
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    cleanups.length = 0;
    logs.close();
  };
  running.add(cleanup);
  const wanted = opts.apps ?? ['api', 'worker'];
  const starting = startStep(
    `${opts.name}: starting its system`,
    `Temporal, ${opts.embeddedPostgres ? 'embedded ' : ''}PostgreSQL, anvil, OpenBao, ${wanted.join(', ')}`,
  );
  // A scenario's faults, each a step with its duration on stderr.
  const step = (what: string, work: () => Promise<void>) => timedStep(`${opts.name}: ${what}`, undefined, work);

  try {
    const upstream = await startCountingUpstream(opts.upstreamDelayMs ?? 0);
    cleanups.push(() => upstream.close());

    const postgresUrl = opts.embeddedPostgres ? undefined : await localPostgres();
    const infra = await startInfra({
      dataDir,
      ports: await freeInfraPorts(),
      postgresUrl,
      databaseName: `chaos_${runId}`.toLowerCase(),
      namespace: 'default',
      persistChain: false,
      log,
    });
    cleanups.push(() => infra.stop());
    if (postgresUrl)
      cleanups.push(() => dropDatabase(infra.databaseUrl).then(() => dropDatabase(infra.facilitatorDatabaseUrl)));

    const ports = {
      api: await freePort(),
      facilitator: await freePort(),
      facilitatorPublic: await freePort(),
      workerMetrics: await freePort(),
    };
    const env = appEnvironment(infra, {
      PORT: String(ports.api),
      FACILITATOR_PORT: String(ports.facilitator),
      FACILITATOR_PUBLIC_PORT: String(ports.facilitatorPublic),
      WORKER_METRICS_PORT: String(ports.workerMetrics),
      FACILITATOR_METRICS_PORT: '0',
      FACILITATOR_WORKER_METRICS_PORT: '0',
      API_METRICS_PORT: '0',
      UPSTREAM_ALLOW: `${upstream.hostPort},127.0.0.1:${ports.facilitator}`,
      // The scenarios drive load on purpose from one tenant: the per-agent and per-tenant limits
      // must not be what answers (the tenant's stays below the global 2000/s, 4000).
      RATE_LIMIT_AGENT_RPS: '5000',
      RATE_LIMIT_AGENT_BURST: '10000',
      RATE_LIMIT_TENANT_RPS: '1500',
      RATE_LIMIT_TENANT_BURST: '3000',
      LOG_LEVEL: 'warn',
      ...opts.env,
    });
    const apiUrl = `http://127.0.0.1:${ports.api}`;
    const facilitatorPublicUrl = `http://127.0.0.1:${ports.facilitatorPublic}`;
    const workerMetricsUrl = `http://127.0.0.1:${ports.workerMetrics}/metrics`;
    const processes = appProcesses({
      env,
      log,
      logDir,
      readyUrls: { api: `${apiUrl}/healthz`, facilitator: `${facilitatorPublicUrl}/healthz`, worker: workerMetricsUrl },
    });
    cleanups.push(() => processes.stopAll());

    if (wanted.includes('facilitator'))
      await ensureDevAccount(infra.facilitatorDatabaseUrl, infra.pki.clientCertPem, infra.tokenAddress);
    await Promise.all(wanted.map((name) => processes.start(name)));

    const connection = await Connection.connect({ address: infra.temporalAddress });
    cleanups.push(() => connection.close());
    const temporal = new Client({ connection, namespace: 'default' });

    const checks = checksPool(infra.databaseUrl);
    cleanups.push(() => checks.end());
    starting.end();

    const temporalServer = (action: 'stop' | 'start') =>
      step(`${action} Temporal`, async () => {
        check(infra.parts.temporal !== null, 'this system does not run its own Temporal');
        await infra.parts.temporal[action]();
      });
    const postgresServer = (action: 'stop' | 'start') =>
      step(`${action} PostgreSQL`, async () => {
        check(
          infra.parts.postgres !== null,
          `${action === 'stop' ? 'stopping' : 'starting'} PostgreSQL needs embeddedPostgres: true`,
        );
        if (action === 'stop') await checks.end();
        await infra.parts.postgres[action]();
      });

    return {
      name: opts.name,
      dataDir,
      infra,
      env,
      apiUrl,
      workerMetricsUrl,
      facilitatorUrl: `https://127.0.0.1:${ports.facilitator}`,
      facilitatorPublicUrl,
      upstream,
      apps: processes.apps,
      temporal,
      sql: checks.query,
      token: (tenant, user = 'chaos-user') => mintToken({ secret: env.AUTH_JWT_SECRET, tenant, user }),
      kill: (name) => step(`SIGKILL ${name}`, () => processes.kill(name)),
      start: (name) => step(`start ${name}`, () => processes.start(name)),
      stopTemporal: () => temporalServer('stop'),
      startTemporal: () => temporalServer('start'),
      stopPostgres: () => postgresServer('stop'),
      startPostgres: () => postgresServer('start'),
      stop: () =>
        step('stopping its system', async () => {
          await cleanup();
          if (!process.env.CHAOS_KEEP_DATA) rmSync(dataDir, { recursive: true, force: true });
        }),
    };
  } catch (err) {
    starting.fail();
    await cleanup();
    throw new Error(`${opts.name}: the system did not start: ${(err as Error).message} (logs in ${logDir})`, {
      cause: err,
    });
  }
}

/** Runs `body` against a fresh system and always stops it. */
export async function withSystem<T>(opts: ChaosSystemOptions, body: (system: ChaosSystem) => Promise<T>): Promise<T> {
  const system = await startSystem(opts);
  try {
    return await body(system);
  } catch (err) {
    // Keep the logs of a failed run: they are what explains it.
    process.env.CHAOS_KEEP_DATA = '1';
    throw new Error(`${(err as Error).message} (logs in ${join(system.dataDir, 'logs')})`, { cause: err });
  } finally {
    await system.stop();
  }
}
