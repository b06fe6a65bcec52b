// The facilitator of the test stack, in-process as facilitator-service/main.ts runs it: its mutual-TLS
// listener and its public port on free ports, its own database (migrated), and its embedded
// Temporal worker holding the dev gas wallet (workflows started eagerly on it).
// Tests that need a second facilitator (another task queue, a worker in a child process they
// can kill) start one with `startFacilitatorStack(..., overrides)` and spawn a worker with
// `spawnFacilitatorWorker(env)`.
import { defaultBuildId } from '../../lib/worker-version.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type pg from 'pg';
import type { Client } from '@temporalio/client';
import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { DEV_EXTRA_SCHEMES, type Infra } from '../../scripts/lib/infra.ts';
import { ensureDevGasWallet, fundDevGasWallet, type DevGasWallet } from '../../scripts/dev/gas-wallet.ts';
import { loadFacilitatorConfig, readKeystore, type FacilitatorConfig } from '../../facilitator/config.ts';
import { openFacilitatorPool } from '../../facilitator/db/pool.ts';
import { migrateFacilitator } from '../../facilitator/db/migrations.ts';
import { startFacilitator } from '../../facilitator-service/server.ts';
import { loadKeystoreSigner, type TransactionSigner } from '../../facilitator/signer.ts';
import { createLogger } from '../../lib/log.ts';
import { facilitatorWorkflowsPath } from '../../temporal/facilitator-worker.ts';
import { findSettlement, type SettlementRecord } from '../../facilitator/store/records.ts';
import { waitFor } from './wait.ts';

export type FacilitatorStack = {
  config: FacilitatorConfig;
  /** https://127.0.0.1:port (mutual TLS: /settle and the read-only endpoints). */
  url: string;
  /** http://127.0.0.1:port (/supported, /healthz only). */
  publicUrl: string;
  pool: pg.Pool;
  gasWallet: string;
  /** The environment a facilitator process of this stack runs with (for spawned workers). */
  env: Record<string, string>;
  close(): Promise<void>;
};

let bundle: Promise<WorkflowBundle> | undefined;
/** A logger that drops everything: the SDK's own logs stay out of the test report. */
export const silentLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/**
 * The gas wallet's signer (with the receiver authorizer where batch-settlement is settled),
 * decrypted once per keystore (and password) and run: a keystore's scrypt costs
 * seconds of CPU (3.2 s measured on this 2-core machine under the suite's load), and the stack's
 * facilitator and its replicas share one keystore, as every start on one task queue of its own does.
 */
const signers = new Map<string, Promise<TransactionSigner>>();
function keystoreSigner(config: FacilitatorConfig): Promise<TransactionSigner> {
  const key = JSON.stringify([config.keystore, config.extraSchemes, config.authorizerKeystore]);
  let signer = signers.get(key);
  if (!signer) {
    signers.set(key, (signer = loadKeystoreSigner(config)));
    signer.catch(() => signers.delete(key));
  }
  return signer;
}

/** The facilitator worker's workflow bundle, built once per run. */
export function facilitatorBundle(): Promise<WorkflowBundle> {
  bundle ??= bundleWorkflowCode({ workflowsPath: facilitatorWorkflowsPath, logger: silentLogger });
  return bundle;
}

/** The run's prebuilt workflow bundles (test/support/stack.ts): facilitator worker processes load them. */
let prebuiltBundleDir: string | undefined;
export function usePrebuiltBundles(dir: string): void {
  prebuiltBundleDir = dir;
}

export function facilitatorEnv(infra: Infra, overrides: Record<string, string> = {}): Record<string, string> {
  return {
    FACILITATOR_PORT: '0',
    FACILITATOR_PUBLIC_PORT: '0',
    FACILITATOR_TLS_CERT: infra.pki.files.serverCert,
    FACILITATOR_TLS_KEY: infra.pki.files.serverKey,
    FACILITATOR_TLS_CA: infra.pki.files.ca,
    FACILITATOR_DATABASE_URL: infra.facilitatorDatabaseUrl,
    CHAIN_RPC_URL: infra.chainRpcUrl,
    TOKEN_ADDRESS: infra.tokenAddress,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    FACILITATOR_KEYSTORE_FILE: infra.gasWallet.keystoreFile,
    FACILITATOR_KEYSTORE_PASSWORD_FILE: infra.gasWallet.passwordFile,
    FACILITATOR_AUTHORIZER_KEYSTORE_FILE: infra.receiverAuthorizer.keystoreFile,
    FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD_FILE: infra.receiverAuthorizer.passwordFile,
    // The stack settles upto and batch-settlement beside exact, as npm start's does.
    FACILITATOR_EXTRA_SCHEMES: DEV_EXTRA_SCHEMES,
    // Tests deactivate accounts and drain gas and expect the next call to see it.
    FACILITATOR_ACCOUNT_CACHE_MS: '0',
    FACILITATOR_READINESS_CACHE_MS: '0',
    // The dev chain's gas (1 gwei tips) against the failed-gas budget; its own test sets it low.
    FACILITATOR_FAILED_GAS_DAILY_WEI: '1000000000000000000',
    // A separate worker's metrics listener: only where a test scrapes it (several run at once).
    FACILITATOR_WORKER_METRICS_PORT: '0',
    // One build id for the run, the stack's workers' (a commit made meanwhile changes nothing).
    TEMPORAL_BUILD_ID: defaultBuildId(process.env),
    LOG_LEVEL: 'silent',
    ...(prebuiltBundleDir ? { WORKFLOW_BUNDLE_DIR: prebuiltBundleDir } : {}),
    ...overrides,
  };
}

/**
 * The gas wallet of the facilitators on task queue `queue` (created and funded on first use, the
 * same for every later start on that queue, so a restart keeps its wallet). A facilitator on a
 * queue of its own runs only while its file does: a settlement it leaves unsent at the file's
 * end (a test that kills or drops a transaction mid-flight, or fails) holds a gas nonce that no
 * worker will send, and on the stack's wallet every later settlement of the run would wait
 * behind that gap (the node holds them as future nonces).
 */
export async function ownGasWallet(infra: Infra, queue: string): Promise<DevGasWallet> {
  const wallet = await ensureDevGasWallet(join(dirname(infra.gasWallet.keystoreFile), 'own-wallets', queue));
  const { chainId } = loadFacilitatorConfig(facilitatorEnv(infra)).domain;
  await fundDevGasWallet(infra.chainRpcUrl, chainId, wallet.address);
  return wallet;
}

/** The settings that give a facilitator process `wallet`. */
export const gasWalletEnv = (wallet: DevGasWallet) => ({
  FACILITATOR_KEYSTORE_FILE: wallet.keystoreFile,
  FACILITATOR_KEYSTORE_PASSWORD_FILE: wallet.passwordFile,
});

/**
 * A facilitator on the stack's database and chain. With a task queue or a Temporal of its own
 * (an override), its workflows run only while its file does, so it holds a gas wallet of its
 * own (`ownGasWallet`) unless the overrides name a keystore; otherwise it is another replica of
 * the stack's facilitator, with its wallet.
 */
export async function startFacilitatorStack(
  infra: Infra,
  temporal: Client,
  // ownBundle: the embedded worker bundles its workflows itself (with what it was configured with, e.g. tracing).
  opts: { overrides?: Record<string, string>; inProcessWorker?: boolean; ownBundle?: boolean } = {},
): Promise<FacilitatorStack> {
  const stackQueue = loadFacilitatorConfig(facilitatorEnv(infra)).temporal.taskQueue;
  const queue = opts.overrides?.FACILITATOR_TASK_QUEUE ?? stackQueue;
  const ownTemporal = queue !== stackQueue || opts.overrides?.TEMPORAL_ADDRESS !== undefined;
  const wallet =
    ownTemporal && !opts.overrides?.FACILITATOR_KEYSTORE_FILE ? await ownGasWallet(infra, queue) : undefined;
  const env = facilitatorEnv(infra, {
    ...(opts.inProcessWorker === false ? { FACILITATOR_EMBEDDED_WORKER: 'false' } : {}),
    ...(wallet ? gasWalletEnv(wallet) : {}),
    ...opts.overrides,
  });
  const config = loadFacilitatorConfig(env);
  const pool = openFacilitatorPool(config.databaseUrl);
  await migrateFacilitator(pool);
  let worker;
  if (config.embeddedWorker) {
    worker = {
      signer: await keystoreSigner(config),
      workflowBundle: opts.ownBundle ? undefined : await facilitatorBundle(),
    };
  }
  const running = await startFacilitator(config, {
    pool,
    temporal,
    worker,
    log: createLogger('facilitator', 'silent'),
  });

  return {
    config,
    url: running.url,
    publicUrl: running.publicUrl,
    pool,
    gasWallet: readKeystore(config).address,
    env,
    async close() {
      await running.close();
      await pool.end();
    },
  };
}

export type SpawnedWorker = { child: ChildProcess; ready: Promise<void>; exited: Promise<void> };

/** A facilitator worker in its own process (temporal/facilitator-worker-main.ts), to be killed by a test. */
export function spawnFacilitatorWorker(env: Record<string, string>): SpawnedWorker {
  const child = spawn(process.execPath, ['temporal/facilitator-worker-main.ts'], {
    env: { ...process.env, ...env, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const ready = new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line.includes('facilitator worker running')) resolve();
    });
    child.once('exit', (code, signal) => reject(new Error(`facilitator worker exited early (${signal ?? code})`)));
  });
  ready.catch(() => undefined);
  child.stderr?.resume();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, ready, exited };
}

/**
 * The settlement's record once final (settled or failed): /settle answers as soon as the
 * inclusion is known, and the record is written moments after.
 */
export function finalRecord(pool: pg.Pool, key: string): Promise<SettlementRecord> {
  return until('the final settlement record', async () => {
    const record = await findSettlement(pool, key);
    return record?.status === 'settled' || record?.status === 'failed' ? record : null;
  });
}

/** Polls `probe` (every 50 ms) until it returns something truthy, or fails naming `what` (wait.ts). */
export async function until<T>(
  what: string,
  probe: () => Promise<T | null | undefined>,
  timeoutMs = 30_000,
): Promise<T> {
  return (await waitFor(probe, { timeoutMs, everyMs: 50, what })) as T;
}

/**
 * Runs `then` with the chain's clock moved to `validBefore` (evm_increaseTime and a mined
 * block: no authorization valid before it can land any more), then puts the clock back to
 * the wall clock, so the one anvil of the test run does not stay ahead for the files after
 * this one (their authorizations are signed against the wall clock).
 */
export async function pastValidBefore<T>(
  provider: {
    send(method: string, params: unknown[]): Promise<unknown>;
    getBlock(tag: 'latest'): Promise<{ timestamp: number } | null>;
  },
  validBefore: number,
  then: () => Promise<T>,
): Promise<T> {
  const latest = await provider.getBlock('latest');
  await provider.send('evm_increaseTime', [Math.max(validBefore - (latest?.timestamp ?? 0), 0)]);
  await provider.send('evm_mine', []);
  try {
    return await then();
  } finally {
    await provider.send('evm_setTime', [Math.floor(Date.now() / 1000)]);
  }
}
