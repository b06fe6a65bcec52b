// The chaos scenarios' harness: one isolated system per scenario — its own data folder under
// .chaos-data/, free loopback ports, its own Temporal dev server, PostgreSQL (a database on the
// local server, or an embedded server of its own when the scenario must stop it), anvil and
// OpenBao (scripts/lib/infra.ts) — with the application processes spawned as real child
// processes exactly as `npm start` does, so a scenario can SIGKILL and restart any of them,
// and stop and start Temporal or PostgreSQL under them.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createWriteStream, mkdirSync, rmSync, type WriteStream } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Connection, Client } from '@temporalio/client';
import { appEnvironment, startInfra, type Infra } from '../lib/infra.ts';
import { canConnect, dropDatabase } from '../lib/postgres.ts';
import { freePort, waitFor } from '../lib/ports.ts';
import { stopChild } from '../dev/temporal-dev-server.ts';
import { mintToken } from '../../gateway/tokens.ts';
import { ensureDevAccount } from '../dev/facilitator-account.ts';

export type ChaosScenario = {
  name: string;
  description: string;
  /** Resolves to a one-line summary (the counts that prove the claim); throws on a violated invariant. */
  run: () => Promise<string>;
};

/** Throws the scenario's failure when `ok` is false. */
export function check(ok: boolean, message: string): asserts ok {
  if (!ok) throw new Error(message);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// A counting upstream: answers every request, counts them by X-Request-ID (the gateway sends its
// own per call), and can be told to answer 503, hang up or pause.

export type UpstreamMode = 'ok' | 'fail' | 'reset';

export type CountingUpstream = {
  url: string;
  hostPort: string;
  /** Requests seen per X-Request-ID. */
  counts: Map<string, number>;
  total(): number;
  mode: UpstreamMode;
  /** Milliseconds each answer waits before it is sent (so kills land on calls in flight). */
  delayMs: number;
  close(): Promise<void>;
};

export async function startCountingUpstream(delayMs = 0): Promise<CountingUpstream> {
  const counts = new Map<string, number>();
  let total = 0;
  const state: CountingUpstream = {
    url: '',
    hostPort: '',
    counts,
    total: () => total,
    mode: 'ok',
    delayMs,
    close: async () => undefined,
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const id = String(req.headers['x-request-id'] ?? '');
    total++;
    counts.set(id, (counts.get(id) ?? 0) + 1);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = state.mode;
      if (mode === 'reset') return req.socket.destroy();
      setTimeout(() => {
        res.statusCode = mode === 'fail' ? 503 : 200;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ echo: Buffer.concat(chunks).length, request_id: id }));
      }, state.delayMs);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  state.url = `http://127.0.0.1:${port}/`;
  state.hostPort = `127.0.0.1:${port}`;
  state.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return state;
}

// ---------------------------------------------------------------------------------------------
// Application processes.

export type AppName = 'api' | 'worker' | 'facilitator' | 'facilitator-worker';

const SCRIPTS: Record<AppName, string> = {
  api: 'api/main.ts',
  worker: 'temporal/gateway-worker-main.ts',
  facilitator: 'facilitator/main.ts',
  'facilitator-worker': 'temporal/facilitator-worker-main.ts',
};

export type AppProcess = {
  name: AppName;
  child: ChildProcess;
  /** Exits this harness did not cause (a crash is a finding). */
  unexpectedExits: number;
  kills: number;
};

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
  apps: Map<AppName, AppProcess>;
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

export async function startSystem(opts: ChaosSystemOptions): Promise<ChaosSystem> {
  const runId = `${opts.name.replace(/[^a-z0-9]/gi, '_')}_${randomBytes(3).toString('hex')}`;
  const dataDir = resolve('.chaos-data', runId);
  mkdirSync(join(dataDir, 'logs'), { recursive: true });
  const logs = new Map<string, WriteStream>();
  const logTo = (source: string, line: string) => {
    let stream = logs.get(source);
    if (!stream) logs.set(source, (stream = createWriteStream(join(dataDir, 'logs', `${source}.log`), { flags: 'a' })));
    stream.write(line.endsWith('\n') ? line : `${line}\n`);
  };
  const verbose = Boolean(process.env.CHAOS_VERBOSE);
  const log = (source: string, line: string) => {
    logTo(source, line);
    if (verbose)
      for (const l of line.split('\n')) if (l.trim()) process.stderr.write(`[${opts.name}:${source}] ${l}\n`);
  };

  const cleanups: Array<() => Promise<unknown>> = [];
  const cleanup = async () => {
    running.delete(cleanup);
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    cleanups.length = 0;
    for (const s of logs.values()) s.end();
  };
  running.add(cleanup);

  try {
    const upstream = await startCountingUpstream(opts.upstreamDelayMs ?? 0);
    cleanups.push(() => upstream.close());

    const postgresUrl = opts.embeddedPostgres ? undefined : await localPostgres();
    const infra = await startInfra({
      dataDir,
      ports: {
        temporal: await freePort(),
        postgres: await freePort(),
        anvil: await freePort(),
        openbao: await freePort(),
      },
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
      API_METRICS_PORT: '0',
      UPSTREAM_ALLOW: `${upstream.hostPort},127.0.0.1:${ports.facilitator}`,
      // The scenarios drive load on purpose: the per-agent limit must not be what answers.
      RATE_LIMIT_AGENT_RPS: '5000',
      RATE_LIMIT_AGENT_BURST: '10000',
      LOG_LEVEL: 'warn',
      ...opts.env,
    });
    const apps = new Map<AppName, AppProcess>();
    const apiUrl = `http://127.0.0.1:${ports.api}`;
    const facilitatorPublicUrl = `http://127.0.0.1:${ports.facilitatorPublic}`;
    let stopping = false;

    const spawnApp = (name: AppName): AppProcess => {
      const child = spawn(process.execPath, [SCRIPTS[name]], {
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout?.on('data', (c: Buffer) => log(name, c.toString()));
      child.stderr?.on('data', (c: Buffer) => log(name, c.toString()));
      const previous = apps.get(name);
      const app: AppProcess = {
        name,
        child,
        unexpectedExits: previous?.unexpectedExits ?? 0,
        kills: previous?.kills ?? 0,
      };
      child.once('exit', (code, signal) => {
        if (stopping || (child as ChildProcess & { chaosKilled?: boolean }).chaosKilled) return;
        app.unexpectedExits++;
        log('harness', `${name} exited unexpectedly (${signal ?? code})`);
      });
      apps.set(name, app);
      return app;
    };

    const ready = async (name: AppName) => {
      const app = apps.get(name)!;
      const alive = async () => {
        if (app.child.exitCode !== null || app.child.signalCode !== null)
          throw new Error(`${name} exited during start (see ${join(dataDir, 'logs', `${name}.log`)})`);
      };
      if (name === 'api')
        await waitFor('gateway API', async () => (await alive(), (await fetch(`${apiUrl}/healthz`)).ok), 60_000);
      else if (name === 'facilitator')
        await waitFor(
          'facilitator',
          async () => (await alive(), (await fetch(`${facilitatorPublicUrl}/healthz`)).ok),
          60_000,
        );
      else if (name === 'worker')
        await waitFor(
          'gateway worker',
          async () => (await alive(), (await fetch(`http://127.0.0.1:${ports.workerMetrics}/metrics`)).ok),
          90_000,
        );
      else await alive();
    };

    const start = async (name: AppName) => {
      spawnApp(name);
      await ready(name);
    };
    const kill = async (name: AppName) => {
      const app = apps.get(name);
      if (!app || app.child.exitCode !== null || app.child.signalCode !== null) return;
      (app.child as ChildProcess & { chaosKilled?: boolean }).chaosKilled = true;
      app.kills++;
      const exited = new Promise<void>((r) => app.child.once('exit', () => r()));
      app.child.kill('SIGKILL');
      await exited;
    };
    cleanups.push(async () => {
      stopping = true;
      await Promise.all([...apps.values()].map((a) => stopChild(a.child, 5_000)));
    });

    const wanted = opts.apps ?? ['api', 'worker'];
    if (wanted.includes('facilitator'))
      await ensureDevAccount(infra.facilitatorDatabaseUrl, infra.pki.clientCertPem, infra.tokenAddress);
    await Promise.all(wanted.map((name) => start(name)));

    const connection = await Connection.connect({ address: infra.temporalAddress });
    cleanups.push(() => connection.close());
    const temporal = new Client({ connection, namespace: 'default' });

    let pool: pg.Pool | null = null;
    const sql = async (text: string, params: unknown[] = []) => {
      if (!pool) {
        pool = new pg.Pool({ connectionString: infra.databaseUrl, max: 2 });
        pool.on('error', () => undefined);
      }
      return (await pool.query(text, params)).rows as Array<Record<string, unknown>>;
    };
    cleanups.push(async () => pool?.end());

    return {
      name: opts.name,
      dataDir,
      infra,
      env,
      apiUrl,
      workerMetricsUrl: `http://127.0.0.1:${ports.workerMetrics}/metrics`,
      facilitatorUrl: `https://127.0.0.1:${ports.facilitator}`,
      facilitatorPublicUrl,
      upstream,
      apps,
      temporal,
      sql,
      token: (tenant, user = 'chaos-user') => mintToken({ secret: env.AUTH_JWT_SECRET, tenant, user }),
      kill,
      start,
      stopTemporal: async () => {
        check(infra.parts.temporal !== null, 'this system does not run its own Temporal');
        await infra.parts.temporal.stop();
      },
      startTemporal: async () => {
        check(infra.parts.temporal !== null, 'this system does not run its own Temporal');
        await infra.parts.temporal.start();
      },
      stopPostgres: async () => {
        check(infra.parts.postgres !== null, 'stopping PostgreSQL needs embeddedPostgres: true');
        await pool?.end().catch(() => undefined);
        pool = null;
        await infra.parts.postgres.stop();
      },
      startPostgres: async () => {
        check(infra.parts.postgres !== null, 'starting PostgreSQL needs embeddedPostgres: true');
        await infra.parts.postgres.start();
      },
      stop: async () => {
        await cleanup();
        if (!process.env.CHAOS_KEEP_DATA) rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await cleanup();
    throw new Error(
      `${opts.name}: the system did not start: ${(err as Error).message} (logs in ${join(dataDir, 'logs')})`,
      { cause: err },
    );
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

// ---------------------------------------------------------------------------------------------
// Gateway API helpers.

export type Caller = { apiUrl: string; token: string };

export async function createAgent(caller: Caller, fields: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${caller.apiUrl}/v1/agents`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: `chaos-${randomBytes(4).toString('hex')}`, ...fields }),
  });
  const body = (await res.json()) as { id?: string };
  check(res.status === 201 && typeof body.id === 'string', `agent not created: ${res.status} ${JSON.stringify(body)}`);
  return body.id;
}

export type InvokeResult =
  | { kind: 'answered'; status: number; invocationId: string | null; body: string; retryAfter: string | null }
  | { kind: 'refused'; error: string };

/** One transactional call; a connection that fails (API down) is `refused`, never thrown. */
export async function invoke(
  caller: Caller,
  agentId: string,
  requestId: string,
  body = '{"hello":"chaos"}',
): Promise<InvokeResult> {
  try {
    const res = await fetch(`${caller.apiUrl}/v1/proxy/${agentId}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${caller.token}`,
        'content-type': 'application/json',
        'x-request-id': requestId,
      },
      body,
      signal: AbortSignal.timeout(120_000),
    });
    const text = await res.text();
    let invocationId: string | null = null;
    if (res.status === 202) invocationId = (JSON.parse(text) as { invocation_id: string }).invocation_id;
    return {
      kind: 'answered',
      status: res.status,
      invocationId,
      body: text,
      retryAfter: res.headers.get('retry-after'),
    };
  } catch (err) {
    return { kind: 'refused', error: ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message };
  }
}

/** One streaming call (`/v1/proxy/{id}/stream`), read to its end; a failed connection is `refused`. */
export async function invokeStream(
  caller: Caller,
  agentId: string,
  requestId: string,
  body = '{"hello":"chaos"}',
): Promise<InvokeResult> {
  try {
    const res = await fetch(`${caller.apiUrl}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${caller.token}`,
        'content-type': 'application/json',
        'x-request-id': requestId,
      },
      body,
      signal: AbortSignal.timeout(120_000),
    });
    return {
      kind: 'answered',
      status: res.status,
      invocationId: res.headers.get('x-gateway-invocation-id'),
      body: await res.text(),
      retryAfter: res.headers.get('retry-after'),
    };
  } catch (err) {
    return { kind: 'refused', error: ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message };
  }
}

export type InvocationView = {
  status: string;
  error_class: string | null;
  upstream_status: number | null;
  request_id?: string;
};

export async function getInvocation(
  caller: Caller,
  agentId: string,
  invocationId: string,
): Promise<InvocationView | null> {
  const res = await fetch(`${caller.apiUrl}/v1/proxy/${agentId}/invocations/${invocationId}`, {
    headers: { authorization: `Bearer ${caller.token}` },
  });
  if (res.status !== 200) return null;
  return (await res.json()) as InvocationView;
}

/** Polls until every invocation is terminal (through the API) or the deadline passes; returns each one's last view. */
export async function awaitTerminal(
  caller: Caller,
  agentId: string,
  ids: string[],
  timeoutMs: number,
): Promise<Map<string, InvocationView | null>> {
  const views = new Map<string, InvocationView | null>();
  const open = new Set(ids);
  const deadline = Date.now() + timeoutMs;
  while (open.size && Date.now() < deadline) {
    const batch = [...open];
    for (let i = 0; i < batch.length; i += 20) {
      await Promise.all(
        batch.slice(i, i + 20).map(async (id) => {
          const view = await getInvocation(caller, agentId, id).catch(() => null);
          views.set(id, view);
          if (view && (view.status === 'succeeded' || view.status === 'failed')) open.delete(id);
        }),
      );
    }
    if (open.size) await sleep(1_000);
  }
  return views;
}

/**
 * Waits (up to `timeoutMs`) for a workflow to close and returns its status name and result. A
 * row turns terminal before its workflow closes (the activity writes it, then the workflow
 * returns), and an activity's result sent while Temporal was down is only recovered by its retry.
 */
export async function awaitWorkflow(
  temporal: Client,
  workflowId: string,
  timeoutMs: number,
): Promise<{ status: string; result: unknown }> {
  const handle = temporal.workflow.getHandle(workflowId);
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    handle.result().catch((err: Error) => ({ error: err.message })),
    new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), timeoutMs))),
  ]).finally(() => clearTimeout(timer));
  return { status: (await handle.describe()).status.name, result };
}

/** Runs `count` jobs with at most `concurrency` at once. */
export async function runPool<T>(count: number, concurrency: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await job(i);
      }
    }),
  );
  return results;
}

/** Counts values: `{a: 3, b: 1}`. */
export function tally(values: Iterable<string>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}

export const formatTally = (t: Record<string, number>) =>
  Object.entries(t)
    .sort()
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
