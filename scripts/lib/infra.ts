// The infrastructure under the gateway, started the same way by `npm start` and by the test
// run: Temporal dev server, PostgreSQL, anvil with the token (and Permit2, the x402 upto
// proxy and the x402 batch-settlement contracts at their canonical addresses), OpenBao, the dev PKI, the
// development secrets and the migrations. Each part is skipped when configuration points at
// an existing one (TEMPORAL_ADDRESS, DATABASE_URL, CHAIN_RPC_URL, VAULT_ADDR). A Redis is started
// only when asked for (`ports.redis`: the test stack's shared limiters); `npm start` runs one
// API, whose limits live in memory unless REDIS_URL names a Redis.
import { defaultBuildId } from '../../lib/worker-version.ts';
import { join } from 'node:path';
import { mkdirSync } from 'node:fs';
import { ensureTool } from './tools.ts';
import { assertPortFree, freePort } from './ports.ts';
import { ensureDatabase, startEmbeddedPostgres, withDatabase, type PostgresHandle } from './postgres.ts';
import { configureTenantAccess, startOpenBao } from './openbao.ts';
import { startRedis } from './redis.ts';
import { loadVaultConfig } from '../../gateway/credentials/config.ts';
import { loadDevSecrets, type DevSecrets } from './secrets.ts';
import { startTemporalDevServer, type DevServer } from '../dev/temporal-dev-server.ts';
import { deployToken, placeBatchSettlementContracts, placeUptoContracts, startAnvil } from '../dev/chain.ts';
import { ensureDevPki, type DevPki } from '../dev/pki.ts';
import { ensureDevGasWallet, fundDevGasWallet, type DevGasWallet } from '../dev/gas-wallet.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { openOrm, migrate } from '../../gateway/db/orm.ts';

export type InfraOptions = {
  dataDir: string;
  /** `redis`: start a redis-server on this port (none otherwise). */
  ports: { temporal: number; temporalUi?: number; postgres: number; anvil: number; openbao: number; redis?: number };
  /** An existing PostgreSQL server (any database on it); otherwise an embedded one is started. */
  postgresUrl?: string;
  databaseName: string;
  temporalAddress?: string;
  namespace: string;
  chainRpcUrl?: string;
  vault?: { addr: string; token: string };
  /** Keep chain state across restarts (npm start) or not (tests). */
  persistChain: boolean;
  /** Where compiled contracts are cached (default: `contracts` in dataDir); tests share one across runs. */
  contractsCacheDir?: string;
  log: (source: string, line: string) => void;
};

/** Free loopback ports for every server startInfra runs, for a run beside others (tests, chaos, benchmarks). */
export async function freeInfraPorts(): Promise<InfraOptions['ports']> {
  return { temporal: await freePort(), postgres: await freePort(), anvil: await freePort(), openbao: await freePort() };
}

export type Infra = {
  temporalAddress: string;
  temporalUiUrl: string | null;
  databaseUrl: string;
  facilitatorDatabaseUrl: string;
  chainRpcUrl: string;
  tokenAddress: string;
  /** The Redis this run started (`ports.redis`), else null. */
  redisUrl: string | null;
  /** `token` is the gateway's (on our own OpenBao it may only mint per-tenant child tokens
   *  through `tenantRole`); `adminToken` writes secrets as an operator would. */
  vault: { addr: string; token: string; tenantRole?: string; adminToken: string };
  pki: DevPki;
  /** The facilitator's gas wallet keystore (generated on first start; funded on our own anvil). */
  gasWallet: DevGasWallet;
  /** The batch-settlement receiver authorizer's keystore (generated on first start). */
  receiverAuthorizer: DevGasWallet;
  secrets: DevSecrets;
  /** The parts this run started itself (null when configuration pointed at an existing one),
   *  stoppable and startable again on the same port and data: the chaos scenarios use them. */
  parts: { temporal: Restartable | null; postgres: Restartable | null };
  stop(): Promise<void>;
};

type Restartable = { stop(): Promise<void>; start(): Promise<void> };

export async function startInfra(opts: InfraOptions): Promise<Infra> {
  mkdirSync(opts.dataDir, { recursive: true });
  const secrets = loadDevSecrets(opts.dataDir);
  const stops: Array<() => Promise<void>> = [];
  // Every server is told to stop at once (each stop sends its signal when called), then all are
  // awaited: none depends on another, and if this process is ended meanwhile, none is left
  // running unsignalled.
  const stop = async () => {
    await Promise.all(stops.splice(0).map((s) => s().catch(() => undefined)));
  };
  // The servers being started side by side: when one fails, the others are let finish starting
  // (each registers its stop once up) so that stopping leaves none of them running.
  const starting: Promise<unknown>[] = [];

  try {
    // Fail fast, in one line, on anything we would have to start but cannot.
    if (!opts.temporalAddress) await assertPortFree(opts.ports.temporal, 'Temporal', 'TEMPORAL_PORT');
    if (!opts.temporalAddress && opts.ports.temporalUi)
      await assertPortFree(opts.ports.temporalUi, 'Temporal UI', 'TEMPORAL_UI_PORT');
    if (!opts.postgresUrl) await assertPortFree(opts.ports.postgres, 'embedded PostgreSQL', 'EMBEDDED_PG_PORT');
    if (!opts.chainRpcUrl) await assertPortFree(opts.ports.anvil, 'anvil', 'ANVIL_PORT');
    if (!opts.vault) await assertPortFree(opts.ports.openbao, 'OpenBao', 'OPENBAO_PORT');
    const temporalBinary = opts.temporalAddress ? undefined : ensureTool('temporal');
    const baoBinary = opts.vault ? undefined : ensureTool('bao');

    // The dev server currently running; a restart (parts.temporal) replaces it on the same port and SQLite file.
    let temporalServer: DevServer | null = null;
    const startTemporal = () =>
      startTemporalDevServer({
        binary: temporalBinary!,
        dbFile: join(opts.dataDir, 'temporal.sqlite'),
        port: opts.ports.temporal,
        uiPort: opts.ports.temporalUi,
        namespace: opts.namespace,
        onOutput: (line) => opts.log('temporal', line),
      }).then((server) => {
        temporalServer = server;
        return server;
      });
    const temporal = opts.temporalAddress
      ? Promise.resolve({ address: opts.temporalAddress, uiUrl: null as string | null })
      : startTemporal().then((server) => {
          stops.push(() => temporalServer?.stop() ?? Promise.resolve());
          return server;
        });

    const postgres: Promise<PostgresHandle> = opts.postgresUrl
      ? Promise.resolve({ baseUrl: opts.postgresUrl, embedded: false, stop: async () => undefined })
      : startEmbeddedPostgres(opts.dataDir, opts.ports.postgres, (line) => opts.log('postgres', line)).then((pg) => {
          stops.push(pg.stop);
          return pg;
        });

    const chain = opts.chainRpcUrl
      ? Promise.resolve({ rpcUrl: opts.chainRpcUrl })
      : startAnvil({
          port: opts.ports.anvil,
          stateFile: opts.persistChain ? join(opts.dataDir, 'anvil-state.json') : undefined,
          log: (line) => opts.log('anvil', line),
        }).then((anvil) => {
          stops.push(anvil.stop);
          return anvil;
        });

    const vault = opts.vault
      ? Promise.resolve({
          url: opts.vault.addr,
          token: opts.vault.token,
          tenantRole: process.env.VAULT_TENANT_ROLE || undefined,
          adminToken: opts.vault.token,
        })
      : startOpenBao({
          binary: baoBinary!,
          port: opts.ports.openbao,
          rootToken: secrets.baoRootToken,
          onOutput: (line) => opts.log('openbao', line),
        }).then(async (bao) => {
          stops.push(bao.stop);
          const access = await configureTenantAccess(
            bao.url,
            secrets.baoRootToken,
            loadVaultConfig(process.env).layout,
          );
          return { url: bao.url, ...access, adminToken: secrets.baoRootToken };
        });

    const redis = opts.ports.redis
      ? startRedis({
          port: opts.ports.redis,
          dataDir: join(opts.dataDir, 'redis'),
          onOutput: (line) => opts.log('redis', line),
        }).then((server) => {
          stops.push(server.stop);
          return server.url;
        })
      : Promise.resolve(null);

    const pki = ensureDevPki(join(opts.dataDir, 'pki'));

    starting.push(temporal, postgres, chain, vault, redis, pki);
    const [temporalReady, pg, chainReady, vaultReady, redisUrl, pkiReady] = await Promise.all([
      temporal,
      postgres,
      chain,
      vault,
      redis,
      pki,
    ]);
    const databaseUrl = withDatabase(pg.baseUrl, opts.databaseName);
    const facilitatorDatabaseUrl = withDatabase(pg.baseUrl, `${opts.databaseName}_facilitator`);
    await ensureDatabase(databaseUrl);
    await ensureDatabase(facilitatorDatabaseUrl);

    const orm = await openOrm(databaseUrl, { poolMax: 2 });
    try {
      await migrate(orm);
    } finally {
      await orm.close();
    }
    const contractsCache = opts.contractsCacheDir ?? join(opts.dataDir, 'contracts');
    const token = await deployToken(chainReady.rpcUrl, contractsCache);
    await placeUptoContracts(chainReady.rpcUrl, contractsCache);
    await placeBatchSettlementContracts(chainReady.rpcUrl, contractsCache);
    const gasWallet = await ensureDevGasWallet(join(opts.dataDir, 'facilitator'));
    const receiverAuthorizer = await ensureDevGasWallet(join(opts.dataDir, 'facilitator'), 'receiver-authorizer');
    if (!opts.chainRpcUrl) await fundDevGasWallet(chainReady.rpcUrl, 8453, gasWallet.address);

    return {
      temporalAddress: temporalReady.address,
      temporalUiUrl: temporalReady.uiUrl,
      databaseUrl,
      facilitatorDatabaseUrl,
      chainRpcUrl: chainReady.rpcUrl,
      tokenAddress: token.address,
      redisUrl,
      vault: {
        addr: vaultReady.url,
        token: vaultReady.token,
        tenantRole: vaultReady.tenantRole,
        adminToken: vaultReady.adminToken,
      },
      pki: pkiReady,
      gasWallet,
      receiverAuthorizer,
      secrets,
      parts: {
        temporal: opts.temporalAddress
          ? null
          : {
              stop: async () => {
                await temporalServer?.stop();
                temporalServer = null;
              },
              start: async () => {
                if (!temporalServer) await startTemporal();
              },
            },
        postgres: pg.start ? { stop: pg.stop, start: pg.start } : null,
      },
      stop,
    };
  } catch (err) {
    await Promise.allSettled(starting);
    await stop();
    throw err;
  }
}

/** The schemes a local system's facilitator settles beside exact (FACILITATOR_EXTRA_SCHEMES), unless set. */
export const DEV_EXTRA_SCHEMES = [SCHEME_UPTO, SCHEME_BATCH_SETTLEMENT].join(',');

/** The environment every application process (API, worker, facilitator) runs with. */
export function appEnvironment(infra: Infra, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string | undefined> = {
    DATABASE_URL: infra.databaseUrl,
    FACILITATOR_DATABASE_URL: infra.facilitatorDatabaseUrl,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    AUTH_JWT_SECRET: process.env.AUTH_JWT_SECRET ?? infra.secrets.jwtSecret,
    CHAIN_RPC_URL: infra.chainRpcUrl,
    TOKEN_ADDRESS: infra.tokenAddress,
    VAULT_ADDR: infra.vault.addr,
    VAULT_TOKEN: infra.vault.token,
    VAULT_TENANT_ROLE: infra.vault.tenantRole,
    // Managed credentials' key-encryption keyring: the generated dev key unless one is configured.
    VAULT_KEKS: process.env.VAULT_KEKS ?? `dev:${infra.secrets.vaultKek}`,
    VAULT_KEK_CURRENT: process.env.VAULT_KEKS ? process.env.VAULT_KEK_CURRENT : 'dev',
    FACILITATOR_TLS_CERT: infra.pki.files.serverCert,
    FACILITATOR_TLS_KEY: infra.pki.files.serverKey,
    FACILITATOR_TLS_CA: infra.pki.files.ca,
    FACILITATOR_KEYSTORE_FILE: infra.gasWallet.keystoreFile,
    FACILITATOR_KEYSTORE_PASSWORD_FILE: infra.gasWallet.passwordFile,
    FACILITATOR_AUTHORIZER_KEYSTORE_FILE: infra.receiverAuthorizer.keystoreFile,
    FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD_FILE: infra.receiverAuthorizer.passwordFile,
    // The local system sells metered calls: its facilitator settles upto and batch-settlement beside exact.
    FACILITATOR_EXTRA_SCHEMES: process.env.FACILITATOR_EXTRA_SCHEMES ?? DEV_EXTRA_SCHEMES,
    // The dev chain's gas costs about 100 times Base's (1 gwei tips): a failed-gas budget to match.
    FACILITATOR_FAILED_GAS_DAILY_WEI: process.env.FACILITATOR_FAILED_GAS_DAILY_WEI ?? '1000000000000000000',
    // The gateway trusts the dev CA for the facilitator's server certificate.
    SETTLEMENT_CA_FILE: infra.pki.files.ca,
    // One build id for every process of this system however often one restarts: a commit made
    // meanwhile must not turn a restarted worker into a version nobody made current.
    TEMPORAL_BUILD_ID: process.env.TEMPORAL_BUILD_ID ?? defaultBuildId(process.env),
    ...extra,
  };
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}
