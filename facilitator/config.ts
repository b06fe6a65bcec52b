// Facilitator configuration from the environment (zod), like the gateway's. One file serves
// the HTTPS process, its Temporal worker and the operator CLI; each checks the parts it needs.
import { getAddress } from 'ethers';
import { z } from 'zod';
import type { TokenDomain } from '../x402/token.ts';
import { TokenAddressSetting } from '../x402/schemas.ts';
import { SCHEME_UPTO } from '../x402/schemes/upto/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../x402/schemes/batch-settlement/schemas.ts';
import { loadTemporalSettings, type TemporalWorkerSettings } from '../lib/temporal-connection.ts';
import { ConfigError, gatherConfig, LOG_LEVELS, parseEnv, readSettingFile } from '../lib/config.ts';
import { loadWorkerVersion } from '../lib/worker-version.ts';

const amount = z.string().regex(/^[0-9]{1,78}$/, 'must be a decimal integer string');

/** The schemes a deployment may settle beside exact, each by opting in. */
const EXTRA_SCHEMES: readonly string[] = [SCHEME_UPTO, SCHEME_BATCH_SETTLEMENT];

const FacilitatorEnv = z.object({
  FACILITATOR_PORT: z.coerce.number().int().min(0).max(65535).default(8443),
  FACILITATOR_PUBLIC_PORT: z.coerce.number().int().min(0).max(65535).default(8444),
  FACILITATOR_HOST: z.string().default('127.0.0.1'),
  FACILITATOR_TLS_CERT: z.string().optional(),
  FACILITATOR_TLS_KEY: z.string().optional(),
  FACILITATOR_TLS_CA: z.string().optional(),
  FACILITATOR_DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/facilitator'),
  CHAIN_RPC_URL: z.string().default('http://127.0.0.1:8545'),
  CHAIN_ID: z.coerce.number().int().positive().default(8453),
  TOKEN_ADDRESS: TokenAddressSetting,
  // The token's EIP-712 domain; USDC on Base mainnet signs as "USD Coin" version "2".
  TOKEN_NAME: z.string().default('USD Coin'),
  TOKEN_VERSION: z.string().default('2'),
  FACILITATOR_NETWORK: z.string().default('base'),
  // Schemes settled beside exact (the spec's one kind), comma-separated: an operator opts in to
  // each, and /supported lists it only then.
  FACILITATOR_EXTRA_SCHEMES: z
    .string()
    .default('')
    .transform((value) =>
      value
        .split(',')
        .map((name) => name.trim())
        .filter(Boolean),
    )
    .refine((names) => names.every((name) => EXTRA_SCHEMES.includes(name)), {
      message: `must list schemes the facilitator can settle beside exact, comma-separated: ${EXTRA_SCHEMES.join(', ')}`,
    }),
  FACILITATOR_TASK_QUEUE: z.string().default('facilitator'),
  // The HTTPS process runs a worker itself (and starts workflows eagerly on it); more workers
  // may run as separate processes (temporal/facilitator-worker-main.ts) either way.
  FACILITATOR_EMBEDDED_WORKER: z.enum(['true', 'false']).default('true'),
  // The gas wallet: an ethers (Web3 Secret Storage) JSON keystore. Only the worker decrypts it.
  FACILITATOR_KEYSTORE_FILE: z.string().optional(),
  FACILITATOR_KEYSTORE_PASSWORD: z.string().optional(),
  FACILITATOR_KEYSTORE_PASSWORD_FILE: z.string().optional(),
  // The receiver authorizer of batch-settlement channels that delegate it to this facilitator:
  // the key that signs their claims and refunds, kept as the gas wallet's is (a keystore and its
  // password; only the worker decrypts it). Needed only where batch-settlement is settled.
  FACILITATOR_AUTHORIZER_KEYSTORE_FILE: z.string().optional(),
  FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD: z.string().optional(),
  FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD_FILE: z.string().optional(),
  // Guardrail defaults for accounts without their own limits (token smallest units).
  FACILITATOR_DEFAULT_MAX_PER_TX: amount.default('10000000'),
  FACILITATOR_DEFAULT_DAILY_CEILING: amount.default('1000000000'),
  // Gas (wei) an account's settlements may burn per UTC day by reverting on chain after passing
  // simulation (a payer draining its balance in between), counting what its settlements in
  // flight could still burn (gas limit × max fee each); beyond it its /settle answers 429.
  FACILITATOR_FAILED_GAS_DAILY_WEI: amount.default('10000000000000000'),
  // Readiness: gas balance (wei) below this mark reports unhealthy and refuses /settle.
  FACILITATOR_GAS_LOW_WATER_WEI: amount.default('1000000000000000'),
  FACILITATOR_SETTLE_DEADLINE_MS: z.coerce.number().int().positive().default(25_000),
  FACILITATOR_INCLUSION_TIMEOUT_MS: z.coerce.number().int().positive().default(15_000),
  // Fee bumping: a broadcast transaction not mined after this long is re-signed with the same
  // gas nonce and fees raised by FACILITATOR_FEE_BUMP_PERCENT (at least 12.5 %, the nodes'
  // replacement rule), up to FACILITATOR_MAX_FEE_BUMPS times; 0 disables bumping.
  FACILITATOR_FEE_BUMP_AFTER_MS: z.coerce.number().int().nonnegative().default(6_000),
  FACILITATOR_FEE_BUMP_PERCENT: z.coerce.number().int().min(13).max(1000).default(25),
  FACILITATOR_MAX_FEE_BUMPS: z.coerce.number().int().nonnegative().max(20).default(5),
  FACILITATOR_VALIDITY_MARGIN_S: z.coerce.number().int().nonnegative().default(6),
  FACILITATOR_ACCOUNT_CACHE_MS: z.coerce.number().int().nonnegative().default(2_000),
  FACILITATOR_READINESS_CACHE_MS: z.coerce.number().int().nonnegative().default(1_000),
  // The outbox sweeper: every FACILITATOR_SWEEP_EVERY_MS, settlements whose workflow start was
  // not acknowledged FACILITATOR_SWEEP_AFTER_MS after their request get it started (0: off),
  // and settlements still pending that long past their validBefore get their watcher again.
  FACILITATOR_SWEEP_EVERY_MS: z.coerce.number().int().nonnegative().default(2_000),
  FACILITATOR_SWEEP_AFTER_MS: z.coerce.number().int().nonnegative().default(5_000),
  // The Prometheus listener (facilitator/metrics.ts; 0 = off).
  FACILITATOR_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(9465),
  // The separate facilitator worker's own listener: the SDK's temporal_* metrics and the gas gauge.
  FACILITATOR_WORKER_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(9467),
  METRICS_HOST: z.string().default('127.0.0.1'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
});

/** A key kept as an ethers JSON keystore, its password given inline or in a file. */
type Keystore = { file?: string; password?: string; passwordFile?: string };

export type FacilitatorConfig = {
  /** The schemes settled beside exact (FACILITATOR_EXTRA_SCHEMES); absent: none. */
  extraSchemes?: readonly string[];
  port: number;
  publicPort: number;
  host: string;
  tls: { certFile?: string; keyFile?: string; caFile?: string };
  databaseUrl: string;
  chainRpcUrl: string;
  network: string;
  tokenAddress: string;
  domain: TokenDomain;
  /** TEMPORAL_* (lib/temporal-connection.ts), FACILITATOR_TASK_QUEUE, the worker's deployment version (lib/worker-version.ts). */
  temporal: TemporalWorkerSettings;
  embeddedWorker: boolean;
  keystore: Keystore;
  /** The batch-settlement receiver authorizer's keystore (FACILITATOR_AUTHORIZER_KEYSTORE_*). */
  authorizerKeystore?: Keystore;
  guardrails: { maxPerTx: bigint; dailyCeiling: bigint; failedGasDailyWei: bigint };
  gasLowWaterWei: bigint;
  settleDeadlineMs: number;
  inclusionTimeoutMs: number;
  feeBump: { afterMs: number; percent: number; max: number };
  validityMarginSeconds: number;
  accountCacheMs: number;
  readinessCacheMs: number;
  sweep: { everyMs: number; afterMs: number };
  /** FACILITATOR_METRICS_PORT on METRICS_HOST (0 = off). */
  metrics: { port: number; host: string };
  /** FACILITATOR_WORKER_METRICS_PORT on METRICS_HOST, for the separate worker process (0 = off). */
  workerMetrics: { port: number; host: string };
  logLevel: string;
};

/** Every setting of the facilitator; a ConfigError lists every problem at once. */
/** The deployment's default guardrails alone (the operator's tool shows effective limits with them). */
export function guardrailDefaults(env: NodeJS.ProcessEnv = process.env): FacilitatorConfig['guardrails'] {
  const e = FacilitatorEnv.pick({
    FACILITATOR_DEFAULT_MAX_PER_TX: true,
    FACILITATOR_DEFAULT_DAILY_CEILING: true,
    FACILITATOR_FAILED_GAS_DAILY_WEI: true,
  }).parse(env);
  return {
    maxPerTx: BigInt(e.FACILITATOR_DEFAULT_MAX_PER_TX),
    dailyCeiling: BigInt(e.FACILITATOR_DEFAULT_DAILY_CEILING),
    failedGasDailyWei: BigInt(e.FACILITATOR_FAILED_GAS_DAILY_WEI),
  };
}

export function loadFacilitatorConfig(env: NodeJS.ProcessEnv = process.env): FacilitatorConfig {
  const {
    env: e,
    temporal,
    version,
  } = gatherConfig({
    env: () => {
      const e = parseEnv(FacilitatorEnv, env);
      if (e.FACILITATOR_INCLUSION_TIMEOUT_MS >= e.FACILITATOR_SETTLE_DEADLINE_MS)
        throw new ConfigError('FACILITATOR_INCLUSION_TIMEOUT_MS must be below FACILITATOR_SETTLE_DEADLINE_MS');
      return e;
    },
    temporal: () => loadTemporalSettings(env),
    version: () => loadWorkerVersion(env, 'FACILITATOR_DEPLOYMENT_NAME', 'agent-gateway-facilitator'),
  });
  const tokenAddress = getAddress(e.TOKEN_ADDRESS);
  return {
    port: e.FACILITATOR_PORT,
    publicPort: e.FACILITATOR_PUBLIC_PORT,
    host: e.FACILITATOR_HOST,
    tls: { certFile: e.FACILITATOR_TLS_CERT, keyFile: e.FACILITATOR_TLS_KEY, caFile: e.FACILITATOR_TLS_CA },
    databaseUrl: e.FACILITATOR_DATABASE_URL,
    chainRpcUrl: e.CHAIN_RPC_URL,
    network: e.FACILITATOR_NETWORK,
    extraSchemes: e.FACILITATOR_EXTRA_SCHEMES,
    tokenAddress,
    domain: { name: e.TOKEN_NAME, version: e.TOKEN_VERSION, chainId: e.CHAIN_ID, verifyingContract: tokenAddress },
    temporal: {
      address: temporal.connection.address,
      namespace: temporal.namespace,
      taskQueue: e.FACILITATOR_TASK_QUEUE,
      connection: temporal.connection,
      version,
    },
    embeddedWorker: e.FACILITATOR_EMBEDDED_WORKER === 'true',
    keystore: {
      file: e.FACILITATOR_KEYSTORE_FILE,
      password: e.FACILITATOR_KEYSTORE_PASSWORD,
      passwordFile: e.FACILITATOR_KEYSTORE_PASSWORD_FILE,
    },
    authorizerKeystore: {
      file: e.FACILITATOR_AUTHORIZER_KEYSTORE_FILE,
      password: e.FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD,
      passwordFile: e.FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD_FILE,
    },
    guardrails: {
      maxPerTx: BigInt(e.FACILITATOR_DEFAULT_MAX_PER_TX),
      dailyCeiling: BigInt(e.FACILITATOR_DEFAULT_DAILY_CEILING),
      failedGasDailyWei: BigInt(e.FACILITATOR_FAILED_GAS_DAILY_WEI),
    },
    gasLowWaterWei: BigInt(e.FACILITATOR_GAS_LOW_WATER_WEI),
    settleDeadlineMs: e.FACILITATOR_SETTLE_DEADLINE_MS,
    inclusionTimeoutMs: e.FACILITATOR_INCLUSION_TIMEOUT_MS,
    feeBump: {
      afterMs: e.FACILITATOR_FEE_BUMP_AFTER_MS,
      percent: e.FACILITATOR_FEE_BUMP_PERCENT,
      max: e.FACILITATOR_MAX_FEE_BUMPS,
    },
    validityMarginSeconds: e.FACILITATOR_VALIDITY_MARGIN_S,
    accountCacheMs: e.FACILITATOR_ACCOUNT_CACHE_MS,
    readinessCacheMs: e.FACILITATOR_READINESS_CACHE_MS,
    sweep: { everyMs: e.FACILITATOR_SWEEP_EVERY_MS, afterMs: e.FACILITATOR_SWEEP_AFTER_MS },
    metrics: { port: e.FACILITATOR_METRICS_PORT, host: e.METRICS_HOST },
    workerMetrics: { port: e.FACILITATOR_WORKER_METRICS_PORT, host: e.METRICS_HOST },
    logLevel: e.LOG_LEVEL,
  };
}

/** The TLS files of the mutual-TLS listener, each read once at start; only the HTTPS process needs them. */
export function requireTlsFiles(config: FacilitatorConfig): { cert: Buffer; key: Buffer; ca: Buffer } {
  const { certFile, keyFile, caFile } = config.tls;
  if (!certFile || !keyFile || !caFile) {
    throw new ConfigError('FACILITATOR_TLS_CERT, FACILITATOR_TLS_KEY and FACILITATOR_TLS_CA must all be set');
  }
  return gatherConfig({
    cert: () => readSettingFile('FACILITATOR_TLS_CERT', certFile),
    key: () => readSettingFile('FACILITATOR_TLS_KEY', keyFile),
    ca: () => readSettingFile('FACILITATOR_TLS_CA', caFile),
  });
}

/** The setting names of a keystore: the gas wallet's (FACILITATOR_KEYSTORE_*) or the receiver authorizer's. */
const KEYSTORE_SETTINGS = {
  gas: 'FACILITATOR_KEYSTORE',
  authorizer: 'FACILITATOR_AUTHORIZER_KEYSTORE',
} as const;
export type KeyName = keyof typeof KEYSTORE_SETTINGS;

/** The setting that names a keystore's file. */
export function keystoreFileSetting(key: KeyName): string {
  return `${KEYSTORE_SETTINGS[key]}_FILE`;
}

function keystoreOf(config: FacilitatorConfig, key: KeyName): Keystore {
  return (key === 'gas' ? config.keystore : config.authorizerKeystore) ?? {};
}

/** A keystore's text and its public `address` field (read without decrypting it): the gas wallet's by default. */
export function readKeystore(config: FacilitatorConfig, key: KeyName = 'gas'): { json: string; address: string } {
  const variable = keystoreFileSetting(key);
  const file = keystoreOf(config, key).file;
  if (!file) throw new ConfigError(`${variable} must be set`);
  const json = readSettingFile(variable, file).toString('utf8');
  let address: unknown;
  try {
    address = (JSON.parse(json) as { address?: unknown }).address;
  } catch {
    throw new ConfigError(`${variable}: cannot read ${file} as a JSON keystore (not JSON)`);
  }
  if (typeof address !== 'string' || !/^(0x)?[0-9a-fA-F]{40}$/.test(address))
    throw new ConfigError(`${variable}: ${file} has no address field; is it an ethers JSON keystore?`);
  return { json, address: getAddress(`0x${address.replace(/^0x/, '').toLowerCase()}`) };
}

const keyAddresses = {
  gas: new WeakMap<FacilitatorConfig, string>(),
  authorizer: new WeakMap<FacilitatorConfig, string>(),
};

/** A key's address from its keystore's public `address` field, read once per configuration, never decrypted. */
function keyAddress(config: FacilitatorConfig, key: KeyName): string {
  let address = keyAddresses[key].get(config);
  if (address === undefined) keyAddresses[key].set(config, (address = readKeystore(config, key).address));
  return address;
}

/**
 * The gas wallet's address: what a process that holds no key (the HTTPS process with a
 * separate worker) names as the facilitator that settles upto payments.
 */
export function gasWalletAddress(config: FacilitatorConfig): string {
  return keyAddress(config, 'gas');
}

/** Whether this deployment settles batch-settlement, and so keeps a receiver authorizer. */
export function settlesBatch(config: Pick<FacilitatorConfig, 'extraSchemes'>): boolean {
  return config.extraSchemes?.includes(SCHEME_BATCH_SETTLEMENT) ?? false;
}

/** The receiver authorizer's address: what /supported names as batch-settlement's `extra.receiverAuthorizer`. */
export function receiverAuthorizerAddress(config: FacilitatorConfig): string {
  return keyAddress(config, 'authorizer');
}

/** A keystore's password, from its `_PASSWORD` setting or the file its `_PASSWORD_FILE` names. */
export function keystorePassword(config: FacilitatorConfig, key: KeyName = 'gas'): string {
  const { password, passwordFile } = keystoreOf(config, key);
  const variable = `${KEYSTORE_SETTINGS[key]}_PASSWORD`;
  if (password !== undefined) return password;
  if (!passwordFile) throw new ConfigError(`${variable} or ${variable}_FILE must be set`);
  return readSettingFile(`${variable}_FILE`, passwordFile).toString('utf8').trim();
}

/** The setting that gave a keystore's password, for a message that must not quote it. */
export function passwordSource(config: FacilitatorConfig, key: KeyName = 'gas'): string {
  const variable = `${KEYSTORE_SETTINGS[key]}_PASSWORD`;
  return keystoreOf(config, key).password !== undefined ? variable : `${variable}_FILE`;
}

/**
 * The files a facilitator process reads at start, read now, every one that fails a line of its
 * own: the HTTPS process's TLS files, the keystore (its address, for the gas gauge) and, where
 * the gas key is decrypted, its password; the same of the receiver authorizer's where
 * batch-settlement is settled.
 */
export function requireStartFiles(config: FacilitatorConfig, needs: { tls: boolean; decrypts: boolean }): void {
  gatherConfig({
    tls: () => needs.tls && requireTlsFiles(config),
    keystore: () => readKeystore(config),
    password: () => needs.decrypts && keystorePassword(config),
    authorizer: () => settlesBatch(config) && readKeystore(config, 'authorizer'),
    authorizerPassword: () => settlesBatch(config) && needs.decrypts && keystorePassword(config, 'authorizer'),
  });
}
