// The one stack a test run shares (root hooks in test/setup.ts): one Temporal dev server, one
// fresh PostgreSQL database, one anvil with the token, one OpenBao, one Redis (for the tests of
// limits shared across replicas; the stack's own API limits in memory), and the gateway itself
// (API on a free port, worker in-process). Tests reach it through `stack()`.
import { randomBytes } from 'node:crypto';
import { within } from './wait.ts';
import { rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WorkflowBundle, Worker } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import { freeInfraPorts, startInfra, type Infra } from '../../scripts/lib/infra.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { canConnect, dropDatabase } from '../../scripts/lib/postgres.ts';
import { loadGatewayConfig, type GatewayConfig } from '../../gateway/config.ts';
import { openOrm } from '../../gateway/db/orm.ts';
import { createLogger } from '../../lib/log.ts';
import { startGateway } from '../../api/wiring.ts';
import { startMetricsServer } from '../../lib/observability/http.ts';
import { mintToken } from '../../scripts/lib/tokens.ts';
import { connectClient } from '../../temporal/client.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import { runWorkerVersion } from '../../temporal/worker-deployment.ts';
import { createVaultClient, type VaultClient } from '../../gateway/credentials/vault.ts';
import { openChangeFeed, type ChangeFeed } from '../../gateway/db/change-feed.ts';
import { startFacilitatorStack, usePrebuiltBundles, type FacilitatorStack } from './facilitator.ts';
import { buildWorkflowBundles, prebuiltWorkflowBundle } from '../../temporal/workflow-bundles.ts';
import { generateKey, readKeys } from '../../gateway/receipts/keys.ts';
import { cachedConsoleBuild } from '../../scripts/lib/console-build.ts';
import { foldInBackground } from '../../gateway/analytics/fold.ts';

export type Stack = {
  infra: Infra;
  config: GatewayConfig;
  apiUrl: string;
  /** The run's own Redis (scripts/lib/redis.ts), for replicas that share limits through it. */
  redisUrl: string;
  orm: MikroORM;
  temporal: Client;
  workflowBundle: WorkflowBundle;
  token(tenant: string, user?: string): Promise<string>;
  /** Upstream hosts the tests' own loopback servers listen on; exempt from the SSRF guard. */
  allow: string[];
  /** The settlement facilitator, in-process (test/support/facilitator.ts). */
  facilitator: FacilitatorStack;
  /** The change feed of the stack's API (its gate caches), as api/main.ts opens it. */
  feed: ChangeFeed;
  /** The vault reader (child tokens) the in-process API and worker share, as one process would. */
  vaultClient: VaultClient;
  /** This process's metrics listener (API and worker share the registry), as api/main.ts starts it. */
  metricsUrl: string;
  /** The console's build the API serves at /console (built once per change of its sources, shared by every run). */
  consoleDir: string;
  /**
   * Both workers' bundles as `npm run build` writes them (WORKFLOW_BUNDLE_DIR): the worker
   * processes tests spawn load them instead of each bundling its workflows at start (webpack,
   * seconds of CPU every time).
   */
  bundleDir: string;
};

let current: Stack | undefined;
const cleanups: Array<() => Promise<unknown>> = [];

export function stack(): Stack {
  if (!current) throw new Error('the test stack is not running (test/setup.ts root hook)');
  return current;
}

/**
 * DATABASE_URL when set; else, for a shard of the suite told so (TEST_OWN_POSTGRES=1: all but
 * the first, scripts/lib/shards.ts), a server of its own, so that one shard's connections never
 * count against another's on a shared server's max_connections; else the local server on 5432
 * when it answers; else an embedded one.
 */
async function localPostgres(): Promise<string | undefined> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  if (process.env.TEST_OWN_POSTGRES === '1') return undefined;
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  return (await canConnect(local)) ? local : undefined;
}

/** The compiled-contract cache every run shares (test/settlement/chain.test.ts uses it too). */
export const CONTRACTS_CACHE_DIR = resolve('.test-data', 'contracts');
/** The console builds every run shares, one folder per hash of their sources (scripts/lib/console-build.ts). */
const CONSOLE_CACHE_DIR = resolve('.test-data', 'console');

export async function startStack(): Promise<Stack> {
  const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const dataDir = resolve('.test-data', `run-${runId}`);
  // Removed last, after every service in it stopped (an embedded PostgreSQL's files are ~50 MB).
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const quiet = process.env.TEST_VERBOSE
    ? (source: string, line: string) => console.log(`[${source}] ${line}`)
    : () => undefined;
  const infra = await startInfra({
    dataDir,
    // The Temporal Web UI too: the console test follows an invocation's link to its workflow there.
    ports: { ...(await freeInfraPorts()), temporalUi: await freePort(), redis: await freePort() },
    postgresUrl: await localPostgres(),
    databaseName: `gw_test_${runId}`,
    namespace: 'default',
    persistChain: false,
    // Shared across runs (keyed by source and compiler, written atomically): compiled once, not per run.
    contractsCacheDir: CONTRACTS_CACHE_DIR,
    log: quiet,
  });
  cleanups.push(() => infra.stop());
  cleanups.push(() =>
    dropDatabase(infra.databaseUrl)
      .then(() => dropDatabase(infra.facilitatorDatabaseUrl))
      .catch(() => undefined),
  );

  const allow = ['127.0.0.1'];
  // Built once and kept while the console's sources stay the same (tens of ms when it must build).
  const consoleBuild = await cachedConsoleBuild(CONSOLE_CACHE_DIR);
  const config = loadGatewayConfig({
    PORT: '0',
    DATABASE_URL: infra.databaseUrl,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    AUTH_JWT_SECRET: infra.secrets.jwtSecret,
    CHAIN_RPC_URL: infra.chainRpcUrl,
    UPSTREAM_ALLOW: allow.join(','),
    UPSTREAM_TIMEOUT_MS: '5000',
    // Circuits half-open after 5 s rather than 10: the tests that wait for it wait less, and the
    // refusals they assert while it is open still fit.
    UPSTREAM_BREAKER_HALF_OPEN_MS: '5000',
    // A workflow start waits up to 15 s rather than 2 before it is left to a start relay: this
    // API runs none (the files that need one run their own), and with the machine's cores
    // saturated by shards a start can take longer than 2 s.
    WORKFLOW_START_DEADLINE_MS: '15000',
    // The fuzz suites give agents rates up to the schema's own bound, and send thousands of calls
    // from one tenant: its bucket is most of the global one (2000/s, 4000) here.
    RATE_LIMIT_AGENT_MAX_RPS: '100000',
    RATE_LIMIT_AGENT_MAX_BURST: '100000',
    RATE_LIMIT_TENANT_RPS: '1500',
    RATE_LIMIT_TENANT_BURST: '3000',
    // Every test reaches this API from one address, so the public surfaces' per-client buckets
    // would be the whole run's, and a test's challenge would depend on how fast the files before
    // it ran. The files that test those limits start a gateway of their own with them set.
    PUBLIC_CHALLENGE_RPS_PER_CLIENT: '1000',
    PUBLIC_RPS_PER_CLIENT: '1000',
    PUBLIC_POLL_RPS_PER_CLIENT: '1000',
    PUBLIC_DISCOVERY_RPS_PER_CLIENT: '1000',
    VAULT_ADDR: infra.vault.addr,
    VAULT_TOKEN: infra.vault.token,
    VAULT_TENANT_ROLE: infra.vault.tenantRole,
    // The dev key is current; `next` is a second key the KEK-rotation test rotates to, listed
    // up front as a deployment would before running `npm run rotate-kek`.
    VAULT_KEKS: `dev:${infra.secrets.vaultKek},next:${randomBytes(32).toString('base64')}`,
    VAULT_KEK_CURRENT: 'dev',
    TOKEN_ADDRESS: infra.tokenAddress,
    SETTLEMENT_CA_FILE: infra.pki.files.ca,
    LOG_LEVEL: 'silent',
    CONSOLE_DIR: consoleBuild.dir,
    TEMPORAL_UI_URL: infra.temporalUiUrl!,
    // Receipt signing keys of this run, not the developer's .data folder.
    RECEIPT_KEYS_DIR: resolve(dataDir, 'receipt-keys'),
  });
  // A provisioned folder, as a deployment's: its first key is made before anything signs.
  if (readKeys(config.receipts.keysDir).length === 0) generateKey(config.receipts.keysDir);
  const orm = await openOrm(config.databaseUrl);
  cleanups.push(() => orm.close());
  const temporal = await connectClient(config.temporal.address, config.temporal.namespace);
  cleanups.push(() => temporal.connection.close());
  // Shards of one run share the bundles their parent built (TEST_BUNDLE_DIR, scripts/lib/shards.ts).
  const bundleDir = process.env.TEST_BUNDLE_DIR ?? resolve(dataDir, 'workflow-bundles');
  if (!process.env.TEST_BUNDLE_DIR) await buildWorkflowBundles(bundleDir);
  usePrebuiltBundles(bundleDir);
  const facilitator = await startFacilitatorStack(infra, temporal);
  cleanups.push(() => settledWithin(facilitator.close(), STOP_GRACE_MS));

  // The gateway's prebuilt bundle, as a production worker loads it; every worker of the run
  // (including ones tests start in this process) reuses it.
  const workflowBundle = prebuiltWorkflowBundle('gateway', { WORKFLOW_BUNDLE_DIR: bundleDir })!.workflowBundle;
  const feed = openChangeFeed(orm);
  const vaultClient = createVaultClient(config.vault);
  const { worker, connection } = await createGatewayWorker(config, orm, { workflowBundle, vaultClient });
  // Every run is a fresh dev server: this worker's version becomes the deployment's current one,
  // which the workers tests start later (same deployment, same build id) join on their own queues.
  const version = await runWorkerVersion(worker, connection, config.temporal, createLogger('worker', 'silent'));
  cleanups.push(async () => {
    shutdownWorker(worker);
    await settledWithin(version.running, STOP_GRACE_MS);
    await connection.close();
  });
  if (!version.current)
    throw new Error(`the gateway worker's version ${config.temporal.version.buildId} did not become current`);

  const server: Server = await startGateway(
    config,
    orm,
    temporal,
    createLogger('api', process.env.TEST_API_LOG ?? 'silent'),
    {
      feed,
      vaultClient,
    },
  );
  cleanups.push(
    () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  );
  const apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The analytics fold as every API process runs it (api/main.ts starts it with the other
  // rounds): tests that read analytics after their calls wait for it with analyticsCaughtUp().
  const fold = foldInBackground(orm, createLogger('api', 'silent'), config.analytics.foldEveryMs);
  cleanups.push(() => fold.stop());
  const metricsServer = await startMetricsServer(0, '127.0.0.1');
  cleanups.push(() => new Promise((r) => metricsServer.close(r)));
  const metricsUrl = `http://127.0.0.1:${(metricsServer.address() as AddressInfo).port}/metrics`;

  current = {
    infra,
    config,
    apiUrl,
    redisUrl: infra.redisUrl!,
    orm,
    temporal,
    workflowBundle,
    allow,
    facilitator,
    metricsUrl,
    feed,
    vaultClient,
    bundleDir,
    consoleDir: consoleBuild.dir,
    token: (tenant, user = 'user-1') => mintToken({ secret: infra.secrets.jwtSecret, tenant, user }),
  };
  return current;
}

/**
 * How long the run's end waits for a worker to stop. Its shutdown grace (the upstream deadline and
 * then some, temporal/worker-tuning.ts) is for the activities in hand, and at the end of a run the
 * only ones left are those some test walked away from (an upstream that never answers, a retry in
 * backoff): nothing is asserted on them, the services under them stop next, and mocha exits.
 */
const STOP_GRACE_MS = 2_000;

/** Waits for `work` (whatever its outcome) at most `ms`. */
const settledWithin = (work: Promise<unknown>, ms: number) =>
  within(
    work.catch(() => undefined),
    ms,
    undefined,
  );

function shutdownWorker(worker: Worker): void {
  if (worker.getState() === 'RUNNING') worker.shutdown();
}

/** The longest one step of a stack's stop may take: a stop waiting for an exit that already happened must not hold the run. */
const CLEANUP_BOUND_MS = 30_000;

export async function stopStack(): Promise<void> {
  for (const cleanup of cleanups.reverse()) await settledWithin(cleanup(), CLEANUP_BOUND_MS);
  cleanups.length = 0;
  current = undefined;
}
