// An isolated facilitator for the settlement chaos scenarios (settle-kill, rpc-down): its own
// Temporal dev server, databases, anvil with the token, dev PKI and gas wallet under
// `.chaos-data/<name>-…`, on free loopback ports. The HTTPS listener (mutual TLS) runs in this
// process WITHOUT an embedded worker; the facilitator worker runs as a child process
// (temporal/facilitator-worker-main.ts) that a scenario can SIGKILL and restart. The chain URL
// the facilitator is given can be routed through a proxy the scenario controls.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { Contract, JsonRpcProvider, Wallet, getAddress, hexlify } from 'ethers';
import type pg from 'pg';
import { appEnvironment, freeInfraPorts, startInfra, type Infra } from '../lib/infra.ts';
import { canConnect, dropDatabase } from '../lib/postgres.ts';
import { fund, TOKEN_ABI } from '../dev/chain.ts';
import { issueClientCert } from '../dev/pki.ts';
import { addAccount, type Account } from '../../facilitator/accounts.ts';
import { loadFacilitatorConfig, type FacilitatorConfig } from '../../facilitator/config.ts';
import { openFacilitatorPool } from '../../facilitator/db/pool.ts';
import { migrateFacilitator } from '../../facilitator/db/migrations.ts';
import { startFacilitator, type RunningFacilitator } from '../../facilitator-service/server.ts';
import { createLogger } from '../../lib/log.ts';
import { connectClient } from '../../temporal/client.ts';
import { startStep, timedStep } from '../lib/progress.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../../x402/schemes/exact/eip3009.ts';
import type { PaymentRequirements } from '../../x402/schemas.ts';
import type { ExactSettleRequest } from '../../x402/schemes/exact/schemas.ts';

export const CHAIN_ID = 8453;

export type Reply = { status: number; json: any; retryAfter: string | undefined };

export type SpawnedWorker = { child: ChildProcess; ready: Promise<void>; exited: Promise<void> };

export type FacilitatorSystem = {
  infra: Infra;
  config: FacilitatorConfig;
  pool: pg.Pool;
  /** https://127.0.0.1:port, mutual TLS. */
  url: string;
  publicUrl: string;
  /** Direct to anvil (never through a proxy): the scenario's own view of the chain. */
  chain: JsonRpcProvider;
  token: Contract;
  account: Account;
  gasWallet: string;
  /** POST /settle (or GET) over mutual TLS with the account's client certificate. */
  post(path: string, body: unknown): Promise<Reply>;
  get(path: string): Promise<Reply>;
  startWorker(): SpawnedWorker;
  /** SIGKILLs the current worker (if any) and waits for it to be gone. */
  killWorker(): Promise<void>;
  /** Stops everything; the data folder (with the workers' logs) is kept when `failed` or CHAOS_KEEP_DATA is set. */
  close(failed?: boolean): Promise<void>;
  dataDir: string;
};

async function localPostgres(): Promise<string | undefined> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  return (await canConnect(local)) ? local : undefined;
}

export async function startFacilitatorSystem(opts: {
  name: string;
  /** Turns anvil's URL into the one the facilitator uses (a proxy); identity by default. */
  routeRpc?: (anvilUrl: string) => Promise<string>;
  overrides?: Record<string, string>;
  dailyCeiling?: bigint;
}): Promise<FacilitatorSystem> {
  const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const dataDir = resolve('.chaos-data', `${opts.name}-${runId}`);
  const starting = startStep(`${opts.name}: starting its system`, 'Temporal, PostgreSQL, anvil, the facilitator');
  const verbose = process.env.CHAOS_VERBOSE
    ? (source: string, line: string) => console.log(`[${source}] ${line}`)
    : () => undefined;
  const infra = await startInfra({
    dataDir,
    ports: await freeInfraPorts(),
    postgresUrl: await localPostgres(),
    databaseName: `chaos_${opts.name.replace(/\W/g, '_')}_${runId}`,
    namespace: 'default',
    persistChain: false,
    // The facilitator needs no secret store: an address nothing listens on keeps OpenBao from starting.
    vault: { addr: 'http://127.0.0.1:9', token: 'unused' },
    log: verbose,
  });
  let keepData = Boolean(process.env.CHAOS_KEEP_DATA);
  const cleanups: Array<() => Promise<unknown>> = [
    // Kept after a failure or with CHAOS_KEEP_DATA=1 (workers' logs, the Temporal SQLite file).
    async () => (keepData ? undefined : rmSync(dataDir, { recursive: true, force: true })),
    () => infra.stop(),
    // The facilitator's database is kept with the data folder (its name is in the failure message).
    async () =>
      keepData
        ? undefined
        : dropDatabase(infra.databaseUrl)
            .then(() => dropDatabase(infra.facilitatorDatabaseUrl))
            .catch(() => undefined),
  ];
  const close = async (failed = false) => {
    keepData ||= failed;
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    cleanups.length = 0;
  };
  try {
    const rpcUrl = opts.routeRpc ? await opts.routeRpc(infra.chainRpcUrl) : infra.chainRpcUrl;
    // The environment `npm start` gives its processes, with this system's ports and chain route.
    const env: Record<string, string> = {
      ...appEnvironment(infra),
      FACILITATOR_PORT: '0',
      FACILITATOR_PUBLIC_PORT: '0',
      CHAIN_RPC_URL: rpcUrl,
      FACILITATOR_EMBEDDED_WORKER: 'false',
      FACILITATOR_READINESS_CACHE_MS: '0',
      FACILITATOR_METRICS_PORT: '0',
      FACILITATOR_WORKER_METRICS_PORT: '0',
      LOG_LEVEL: process.env.CHAOS_VERBOSE ? 'info' : 'silent',
      ...opts.overrides,
    };
    const config = loadFacilitatorConfig(env);
    const pool = openFacilitatorPool(config.databaseUrl);
    cleanups.push(() => pool.end());
    await migrateFacilitator(pool);
    const temporal = await connectClient(config.temporal.address, config.temporal.namespace);
    cleanups.push(() => temporal.connection.close());
    const running: RunningFacilitator = await startFacilitator(config, {
      pool,
      temporal,
      log: createLogger('facilitator', env.LOG_LEVEL),
    });
    cleanups.push(() => running.close());

    const caPem = await readFile(infra.pki.files.ca, 'utf8');
    const caKeyPem = await readFile(infra.pki.files.caKey, 'utf8');
    const cert = await issueClientCert({ certPem: caPem, keyPem: caKeyPem }, `chaos-${opts.name}`);
    const account = await addAccount(pool, {
      name: `chaos-${opts.name}`,
      certPem: cert.certPem,
      allowedKinds: [{ network: 'base', asset: infra.tokenAddress }],
      maxPerTx: null,
      dailyCeiling: opts.dailyCeiling ?? null,
    });
    const agent = new Agent({ connect: { ca: caPem, cert: cert.certPem, key: cert.keyPem }, connections: 256 });
    cleanups.push(() => agent.close());
    async function send(method: 'GET' | 'POST', path: string, body?: unknown): Promise<Reply> {
      const res = await request(`${running.url}${path}`, {
        method,
        dispatcher: agent,
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        headersTimeout: 120_000,
        bodyTimeout: 120_000,
      });
      const text = await res.body.text();
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = text;
      }
      const retryAfter = res.headers['retry-after'];
      return { status: res.statusCode, json, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter };
    }

    const chain = new JsonRpcProvider(infra.chainRpcUrl, CHAIN_ID, {
      staticNetwork: true,
      cacheTimeout: -1,
      batchMaxCount: 1,
    });
    cleanups.push(async () => chain.destroy());

    let worker: SpawnedWorker | undefined;
    const killWorker = async () => {
      if (!worker) return;
      const current = worker;
      worker = undefined;
      if (current.child.exitCode === null && current.child.signalCode === null) current.child.kill('SIGKILL');
      await current.exited;
    };
    cleanups.push(killWorker);
    starting.end();

    return {
      infra,
      config,
      pool,
      url: running.url,
      publicUrl: running.publicUrl,
      chain,
      token: new Contract(infra.tokenAddress, TOKEN_ABI, chain),
      account,
      gasWallet: infra.gasWallet.address,
      post: (path, body) => send('POST', path, body),
      get: (path) => send('GET', path),
      startWorker() {
        if (worker) throw new Error('a facilitator worker is already running');
        worker = spawnWorker(env, join(dataDir, 'logs'));
        return worker;
      },
      killWorker: () => timedStep(`${opts.name}: SIGKILL the facilitator worker`, undefined, killWorker),
      close: (failed) => timedStep(`${opts.name}: stopping its system`, undefined, () => close(failed)),
      dataDir,
    };
  } catch (err) {
    starting.fail();
    await close(true);
    throw err;
  }
}

/**
 * temporal/facilitator-worker-main.ts in its own process; `ready` once it polls its task queue.
 * Its output goes to `<logDir>/facilitator-worker.log` (appended across restarts).
 */
function spawnWorker(env: Record<string, string>, logDir: string): SpawnedWorker {
  const child = spawn(process.execPath, ['temporal/facilitator-worker-main.ts'], {
    env: { ...process.env, ...env, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  mkdirSync(logDir, { recursive: true });
  const log = createWriteStream(join(logDir, 'facilitator-worker.log'), { flags: 'a' });
  const lastLines: string[] = [];
  const ready = new Promise<void>((resolveReady, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      log.write(`${line}\n`);
      if (process.env.CHAOS_VERBOSE) console.error(`[facilitator-worker ${child.pid}] ${line}`);
      if (line.includes('facilitator worker running')) resolveReady();
    });
    createInterface({ input: child.stderr! }).on('line', (line) => {
      log.write(`${line}\n`);
      lastLines.push(line);
      if (lastLines.length > 10) lastLines.shift();
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`facilitator worker exited early (${signal ?? code}): ${lastLines.join(' | ')}`)),
    );
  });
  ready.catch(() => undefined);
  const exited = new Promise<void>((r) =>
    child.once('exit', () => {
      log.end();
      r();
    }),
  );
  return { child, ready, exited };
}

export type Authorization = { body: ExactSettleRequest; payer: string; nonce: string; value: bigint; payTo: string };

/**
 * `count` signed EIP-3009 authorizations as x402 clients build them, from payers funded with
 * exactly what they authorize (spread over a few payers, each with several nonces).
 */
export async function signAuthorizations(
  system: FacilitatorSystem,
  count: number,
  value: bigint,
  payers = 4,
): Promise<Authorization[]> {
  const wallets = Array.from({ length: payers }, () => new Wallet(hexlify(randomBytes(32))));
  const perPayer = Math.ceil(count / payers);
  for (const wallet of wallets)
    await fund(system.infra.chainRpcUrl, system.infra.tokenAddress, wallet.address, { usdc: value * BigInt(perPayer) });
  const payTo = new Wallet(hexlify(randomBytes(32))).address;
  const domain = { name: 'USD Coin', version: '2', chainId: CHAIN_ID, verifyingContract: system.infra.tokenAddress };
  const now = Math.floor(Date.now() / 1000);
  const requirements: PaymentRequirements = {
    scheme: 'exact',
    network: 'base',
    maxAmountRequired: String(value),
    resource: 'https://gateway.chaos/v1/proxy/agt_chaos',
    description: 'chaos',
    mimeType: 'application/json',
    payTo: getAddress(payTo),
    maxTimeoutSeconds: 600,
    asset: system.infra.tokenAddress,
    extra: { name: 'USD Coin', version: '2' },
  };
  return Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const wallet = wallets[i % payers];
      const authorization = {
        from: wallet.address,
        to: getAddress(payTo),
        value: String(value),
        validAfter: String(now - 600),
        validBefore: String(now + 900),
        nonce: hexlify(randomBytes(32)),
      };
      const signature = await wallet.signTypedData(domain, TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
      const body: ExactSettleRequest = {
        x402Version: 1,
        paymentPayload: { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization } },
        paymentRequirements: requirements,
      };
      return { body, payer: wallet.address, nonce: authorization.nonce.toLowerCase(), value, payTo: getAddress(payTo) };
    }),
  );
}

/** AuthorizationUsed events since `fromBlock`, by lowercase `payer:nonce`: every transaction that consumed each authorization. */
export async function authorizationsUsed(system: FacilitatorSystem, fromBlock: number): Promise<Map<string, string[]>> {
  const events = await system.token.queryFilter(system.token.filters.AuthorizationUsed(), fromBlock, 'latest');
  const used = new Map<string, string[]>();
  for (const event of events) {
    const args = (event as unknown as { args: { authorizer: string; nonce: string } }).args;
    const key = `${args.authorizer.toLowerCase()}:${args.nonce.toLowerCase()}`;
    used.set(key, [...(used.get(key) ?? []), event.transactionHash]);
  }
  return used;
}

export const authorizationKey = (a: Authorization) => `${a.payer.toLowerCase()}:${a.nonce}`;

/** Transfer events to `payTo` since `fromBlock`. */
export async function transfersTo(system: FacilitatorSystem, payTo: string, fromBlock: number): Promise<number> {
  return (await system.token.queryFilter(system.token.filters.Transfer(null, payTo), fromBlock, 'latest')).length;
}

/**
 * A client that retries 503s (honouring Retry-After, capped) until it gets a final answer or
 * `deadlineMs` passes; returns the first answer and the final one.
 */
export async function settleWithRetry(
  system: FacilitatorSystem,
  body: ExactSettleRequest,
  deadlineMs: number,
  first?: Reply,
): Promise<{ first: Reply; last: Reply; tries: number }> {
  let reply = first ?? (await system.post('/settle', body));
  const initial = reply;
  let tries = 1;
  const until = Date.now() + deadlineMs;
  while (reply.status === 503 && Date.now() < until) {
    const wait = Math.min(Number(reply.retryAfter ?? '1') * 1000 || 1000, 2_000);
    await sleep(wait);
    reply = await system.post('/settle', body);
    tries++;
  }
  return { first: initial, last: reply, tries };
}

/** The account's reserved daily usage (sum over days) from the facilitator's own table. */
export async function reservedUsage(system: FacilitatorSystem): Promise<bigint> {
  const { rows } = await system.pool.query<{ reserved: string | null }>(
    'select sum(reserved)::text as reserved from daily_usage where account_id = $1',
    [system.account.id],
  );
  return BigInt(rows[0]?.reserved ?? '0');
}

/** Settlement records of the account by status. */
export async function recordsByStatus(system: FacilitatorSystem): Promise<Record<string, number>> {
  const { rows } = await system.pool.query<{ status: string; n: string }>(
    'select status, count(*)::text as n from settlements where account_id = $1 group by status',
    [system.account.id],
  );
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

/** Runs a scenario module's `run` when the file is executed directly (`npx node scripts/chaos/<file>`). */
export function runIfMain(meta: ImportMeta, scenario: { name: string; run: () => Promise<string> }): void {
  if (process.argv[1] && resolve(process.argv[1]) === meta.filename) {
    const started = Date.now();
    scenario.run().then(
      (summary) => {
        console.log(`PASS ${scenario.name} (${((Date.now() - started) / 1000).toFixed(1)} s): ${summary}`);
        process.exit(0);
      },
      (err: Error) => {
        console.error(`FAIL ${scenario.name}: ${err.stack ?? err.message}`);
        process.exit(1);
      },
    );
  }
}
