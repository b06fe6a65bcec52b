// Gateway configuration: every process reads its settings from the environment, once,
// through one zod schema, so a typo fails at start with the variable's name.
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { loadVaultConfig, type VaultConfig } from './credentials/config.ts';
import { loadAnalyticsConfig, type AnalyticsConfig } from './analytics/config.ts';
import { loadReceiptConfig, type ReceiptConfig } from './receipts/config.ts';
import { loadObservabilityConfig, type ObservabilityConfig } from '../lib/observability/config.ts';
import { loadPaymentConfig, type PaymentConfig } from './payment/config.ts';
import { loadGateFreshness, type GateFreshness } from './gate-freshness.ts';
import type { AccessLogSettings } from '../lib/observability/access.ts';
import { loadTemporalSettings, type TemporalWorkerSettings } from '../lib/temporal-connection.ts';
import { ConfigError, gatherConfig, LOG_LEVELS, parseEnv } from '../lib/config.ts';
import { loadWorkerVersion } from '../lib/worker-version.ts';

/** How fast a proxied body must arrive (slow uploads answer 408). */
export type BodyPace = { timeoutMs: number; minBytesPerSecond: number; graceMs: number };

/** Bytes of request bodies in flight, per process and per tenant. */
export type BodyBudgetLimits = { processBytes: number; tenantBytes: number };

const csv = z
  .string()
  .default('')
  .transform((value) =>
    value
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean),
  );

/** RFC 7518 §3.2: an HMAC key at least as long as the hash output (SHA-256: 32 bytes). */
export const MIN_HS256_SECRET_BYTES = 32;

/** The Temporal dev server's Web UI (npm start's, `temporal server start-dev`'s default port). */
const DEFAULT_TEMPORAL_UI_URL = 'http://localhost:8233';
/** Where `npm run build` writes the console (scripts/lib/console-build.ts) unless CONSOLE_DIR says otherwise. */
const DEFAULT_CONSOLE_DIR = fileURLToPath(new URL('../dist/console', import.meta.url));

const GatewayEnv = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default('127.0.0.1'),
  DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/gateway'),
  TEMPORAL_TASK_QUEUE: z.string().default('gateway'),
  AUTH_JWT_SECRET: z.string().optional(),
  AUTH_JWKS_URL: z.string().url().optional(),
  AUTH_TENANT_CLAIM: z.string().default('tenant_id'),
  AUTH_USER_CLAIM: z.string().default('sub'),
  // Checked when set, for HS256 and JWKS alike (api/auth.ts).
  AUTH_ISSUER: z.string().min(1).optional(),
  AUTH_AUDIENCE: z.string().min(1).optional(),
  // What /.well-known/oauth-protected-resource lists as the scopes a token may carry (space-separated).
  AUTH_SCOPES: z
    .string()
    .default('')
    .transform((v) => v.split(/\s+/).filter(Boolean)),
  // Oldest accepted token by its `iat`, in seconds or with a unit (`90s`, `15m`, `12h`, `7d`).
  AUTH_MAX_TOKEN_AGE: z
    .string()
    .regex(/^\d+\s*(s|m|h|d)?$/, 'a number of seconds, or with a unit: 90s, 15m, 12h, 7d')
    .transform((v) => Number.parseInt(v, 10) * ({ s: 1, m: 60, h: 3600, d: 86400 }[v.trim().slice(-1)] ?? 1))
    .optional(),
  // A token without `exp` never expires; refused unless this is set to false.
  AUTH_REQUIRE_EXP: z.enum(['true', 'false']).default('true'),
  UPSTREAM_ALLOW: csv,
  // `npm start` sets it: refusing a local upstream_url also says how to allow it (the
  // UPSTREAM_ALLOW value that would), which only the machine's own operator should be told.
  UPSTREAM_ALLOW_HINT: z.enum(['true', 'false']).default('false'),
  UPSTREAM_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  // Requests one tenant may have open to one upstream origin at a time (the pool holds 256).
  UPSTREAM_TENANT_CONNECTIONS: z.coerce.number().int().positive().default(64),
  // How long an open circuit (tenant, upstream origin) fails calls fast before a probe goes through.
  UPSTREAM_BREAKER_HALF_OPEN_MS: z.coerce.number().int().positive().default(10_000),
  // Reading a request body the gateway must hold (transactional, MCP): all of it within the
  // timeout, and at least the minimum rate on average once the grace period is over (408).
  BODY_READ_TIMEOUT_MS: z.coerce.number().int().positive().default(300_000),
  BODY_MIN_BYTES_PER_S: z.coerce.number().int().nonnegative().default(1024),
  BODY_RATE_GRACE_MS: z.coerce.number().int().nonnegative().default(10_000),
  // Request-body bytes held in memory at once: in all (503 past it) and per tenant (429).
  BODY_INFLIGHT_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(512 * 1024 * 1024),
  BODY_INFLIGHT_TENANT_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(128 * 1024 * 1024),
  // Accepted transactional calls whose workflow start is not yet known, in this process and per
  // tenant (503 past either; api/proxy/start-backlog.ts): the bound on calls accepted while
  // Temporal is unreachable.
  START_BACKLOG_MAX: z.coerce.number().int().positive().default(1_000),
  // How long a stopping API lets the requests it is handling finish (a paid call's settlement, a stream).
  API_SHUTDOWN_GRACE_MS: z.coerce.number().int().nonnegative().default(30_000),
  // How long the accepting process waits for a transactional call's workflow start before it
  // leaves the call to the start relay (temporal/invocation-start.ts); the same on every replica. At most
  // 20 s: well inside the relay's 30 s lease, so a start never outlives the lease it runs under.
  WORKFLOW_START_DEADLINE_MS: z.coerce.number().int().positive().max(20_000).default(2_000),
  // How long a paid stream waits for its forwarding mark before it gives its payment back (503).
  STREAM_MARK_DEADLINE_MS: z.coerce.number().int().positive().default(10_000),
  START_BACKLOG_TENANT_MAX: z.coerce.number().int().positive().default(250),
  REDIS_URL: z.string().optional(),
  // Budgets (gateway/budgets/): how often each API process reconciles due reservations with the
  // invocation rows, and how old a reservation whose call never got a row may grow before it is
  // given back although its process lives (default: the settlement timeout and a minute).
  BUDGET_RECONCILE_MS: z.coerce.number().int().positive().default(500),
  BUDGET_NO_ROW_AFTER_MS: z.coerce.number().int().positive().optional(),
  // Proxy rate limits (token buckets; see docs/PROXY.md): per-agent default, and one global bucket.
  RATE_LIMIT_AGENT_RPS: z.coerce.number().positive().default(50),
  RATE_LIMIT_AGENT_BURST: z.coerce.number().int().positive().default(100),
  // The most a tenant may set as its own agent's rate_limit_rps / rate_limit_burst (400 above).
  RATE_LIMIT_AGENT_MAX_RPS: z.coerce.number().positive().default(1000),
  RATE_LIMIT_AGENT_MAX_BURST: z.coerce.number().int().positive().default(2000),
  RATE_LIMIT_GLOBAL_RPS: z.coerce.number().positive().default(2000),
  RATE_LIMIT_GLOBAL_BURST: z.coerce.number().int().positive().default(4000),
  // Each tenant's share over all its agents (default: a quarter of the global bucket; below it).
  RATE_LIMIT_TENANT_RPS: z.coerce.number().positive().optional(),
  RATE_LIMIT_TENANT_BURST: z.coerce.number().int().positive().optional(),
  // Live (active or pending) agents one tenant may have: each has its own rate-limit bucket.
  TENANT_MAX_AGENTS: z.coerce.number().int().positive().default(1000),
  CHAIN_RPC_URL: z.string().default('http://127.0.0.1:8545'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  // The API's access lines and HTTP metrics (lib/observability/access.ts): `each` at once,
  // `batched` off the request's path, `sampled` likewise with one line per ACCESS_LOG_SAMPLE_EVERY
  // answers; metrics are complete and 5xx lines written in every mode.
  ACCESS_LOG: z.enum(['each', 'batched', 'sampled']).default('batched'),
  ACCESS_LOG_SAMPLE_EVERY: z.coerce.number().int().positive().default(100),
  GIT_COMMIT: z.string().optional(),
  // Behind a load balancer: the scheme and host callers reach the API on come from the proxy's
  // X-Forwarded-Proto / X-Forwarded-Host, which only a trusted proxy may set (api/public-url.ts).
  TRUST_PROXY: z.enum(['true', 'false']).default('false'),
  // Public agents (docs/API.md "Selling an agent to any x402 client"): unpaid challenges per
  // client address (all agents) and per tenant (all its public agents), paid calls per payer,
  // and polls of public calls per client address.
  PUBLIC_CHALLENGE_RPS_PER_CLIENT: z.coerce.number().positive().default(5),
  PUBLIC_RPS_PER_CLIENT: z.coerce.number().positive().default(20),
  PUBLIC_CHALLENGE_RPS: z.coerce.number().positive().default(100),
  PUBLIC_PAYER_RPS: z.coerce.number().positive().default(20),
  PUBLIC_POLL_RPS_PER_CLIENT: z.coerce.number().positive().default(20),
  PUBLIC_DISCOVERY_RPS_PER_CLIENT: z.coerce.number().positive().default(5),
  PUBLIC_DISCOVERY_RPS: z.coerce.number().positive().default(100),
  PUBLIC_DISCOVERY_MAX_AGENTS: z.coerce.number().int().positive().default(10_000),
  // The web console (api/console/routes.ts): its build, and where its links to workflows go.
  CONSOLE_DIR: z.string().min(1).optional(),
  // A public client of the OpenID provider AUTH_ISSUER names: the console's "sign in with" (code flow with PKCE).
  CONSOLE_OIDC_CLIENT_ID: z.string().min(1).optional(),
  TEMPORAL_UI_URL: z
    .url({ protocol: /^https?$/, error: 'TEMPORAL_UI_URL must be an http(s) URL (e.g. http://localhost:8233)' })
    .default(DEFAULT_TEMPORAL_UI_URL),
});

/**
 * PUBLIC_URL: the base URL callers reach the API on (scheme, host, optional path prefix), which
 * x402 challenges carry as their `resource`. Without a trailing slash; undefined when unset.
 */
export function loadPublicUrl(env: NodeJS.ProcessEnv): string | undefined {
  const value = env.PUBLIC_URL?.trim();
  if (!value) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.username || url.password || url.search || url.hash)
    throw new ConfigError(
      'PUBLIC_URL must be the absolute http(s) URL callers reach the API on, without credentials, query or fragment (e.g. https://gateway.example.com)',
    );
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

export type GatewayConfig = {
  port: number;
  host: string;
  databaseUrl: string;
  /**
   * TEMPORAL_* (lib/temporal-connection.ts): address, namespace, TLS, API key; TEMPORAL_TASK_QUEUE;
   * the worker's deployment version (lib/worker-version.ts).
   */
  temporal: TemporalWorkerSettings;
  auth: {
    jwtSecret?: string;
    jwksUrl?: string;
    tenantClaim: string;
    userClaim: string;
    issuer?: string;
    audience?: string;
    /** AUTH_SCOPES: the scopes the protected-resource metadata names (api/routes/oauth-metadata.ts). */
    scopes: string[];
    /** Seconds; a token whose `iat` is older is refused. */
    maxTokenAgeSeconds?: number;
    requireExp: boolean;
  };
  /** UPSTREAM_ALLOW, UPSTREAM_ALLOW_HINT, UPSTREAM_TIMEOUT_MS, UPSTREAM_TENANT_CONNECTIONS, UPSTREAM_BREAKER_HALF_OPEN_MS. */
  upstream: {
    allow: string[];
    allowHint: boolean;
    timeoutMs: number;
    tenantConnections: number;
    breakerHalfOpenMs: number;
  };
  /** BODY_READ_TIMEOUT_MS, BODY_MIN_BYTES_PER_S, BODY_RATE_GRACE_MS (api/proxy/body.ts). */
  bodyPace: BodyPace;
  /** BODY_INFLIGHT_MAX_BYTES, BODY_INFLIGHT_TENANT_MAX_BYTES (api/proxy/body-budget.ts). */
  bodyBudget: BodyBudgetLimits;
  /** START_BACKLOG_MAX, START_BACKLOG_TENANT_MAX (api/proxy/start-backlog.ts). */
  startBacklog: { process: number; tenant: number };
  /** API_SHUTDOWN_GRACE_MS (api/main.ts). */
  shutdownGraceMs: number;
  /** WORKFLOW_START_DEADLINE_MS (temporal/invocation-start.ts). */
  workflowStartDeadlineMs: number;
  /** STREAM_MARK_DEADLINE_MS (api/invoke/stream-record.ts). */
  streamMarkDeadlineMs: number;
  redisUrl?: string;
  /** BUDGET_RECONCILE_MS, BUDGET_NO_ROW_AFTER_MS (gateway/budgets/reconcile.ts). */
  budgets: { everyMs: number; noRowAfterMs: number };
  rateLimit: {
    agentRps: number;
    agentBurst: number;
    agentMaxRps: number;
    agentMaxBurst: number;
    /** RATE_LIMIT_TENANT_RPS, RATE_LIMIT_TENANT_BURST: one bucket per tenant (gateway/ratelimit/index.ts). */
    tenantRps: number;
    tenantBurst: number;
    globalRps: number;
    globalBurst: number;
  };
  /** TENANT_MAX_AGENTS: live agents per tenant (gateway/agents/tenant-bound.ts). */
  tenantMaxAgents: number;
  /** GATE_CACHE_FRESHNESS (gateway/gate-freshness.ts). */
  gateFreshness: GateFreshness;
  chainRpcUrl: string;
  logLevel: string;
  /** ACCESS_LOG, ACCESS_LOG_SAMPLE_EVERY (lib/observability/access.ts). */
  accessLog: AccessLogSettings;
  gitCommit?: string;
  /** PUBLIC_URL and TRUST_PROXY: the URL callers reach the API on (api/public-url.ts). */
  publicAddress: { url?: string; trustProxy: boolean };
  /**
   * CONSOLE_DIR (the built console, default dist/console), TEMPORAL_UI_URL (its workflow links) and
   * CONSOLE_OIDC_CLIENT_ID (its sign-in with AUTH_ISSUER's provider; api/console/routes.ts).
   */
  console: { dir: string; temporalUiUrl: string; oidcClientId?: string };
  /** PUBLIC_CHALLENGE_RPS_PER_CLIENT, PUBLIC_RPS_PER_CLIENT, PUBLIC_CHALLENGE_RPS, PUBLIC_PAYER_RPS, PUBLIC_POLL_RPS_PER_CLIENT (api/admission/public-door.ts). */
  publicAgents: {
    challengeRpsPerClient: number;
    rpsPerClient: number;
    challengeRpsPerTenant: number;
    payerRps: number;
    pollRpsPerClient: number;
  };
  /** PUBLIC_DISCOVERY_RPS_PER_CLIENT, PUBLIC_DISCOVERY_RPS, PUBLIC_DISCOVERY_MAX_AGENTS (api/routes/discovery.ts). */
  discovery: { rpsPerClient: number; rps: number; maxAgents: number };
  /** VAULT_KEKS, VAULT_KEK_CURRENT, VAULT_ADDR, VAULT_TOKEN (gateway/credentials/config.ts). */
  vault: VaultConfig;
  /** ANALYTICS_RATE_PER_MIN, ANALYTICS_RATE_BURST, ANALYTICS_FOLD_EVERY_MS (gateway/analytics/config.ts). */
  analytics: AnalyticsConfig;
  /** RECEIPT_KEYS_DIR, RECEIPT_ACTIVE_KID, DATA_DIR (gateway/receipts/config.ts). */
  receipts: ReceiptConfig;
  /** WORKER_METRICS_PORT, METRICS_HOST, OTEL_* (lib/observability/config.ts). */
  observability: ObservabilityConfig;
  /** TOKEN_ADDRESS, CHAIN_ID, TOKEN_NAME/VERSION, X402_*, SETTLEMENT_CA_FILE, SETTLEMENT_TIMEOUT_MS (gateway/payment/config.ts). */
  payment: PaymentConfig;
};

/** An HS256 secret or a JWKS URL, and a secret long enough for HS256. */
function checkAuthSecret(env: NodeJS.ProcessEnv): void {
  const secret = env.AUTH_JWT_SECRET;
  if (!secret && !env.AUTH_JWKS_URL)
    throw new ConfigError('AUTH_JWT_SECRET or AUTH_JWKS_URL must be set (npm start generates a secret into DATA_DIR)');
  const bytes = secret === undefined ? undefined : Buffer.byteLength(secret, 'utf8');
  if (!env.AUTH_JWKS_URL && bytes !== undefined && bytes < MIN_HS256_SECRET_BYTES)
    throw new ConfigError(
      `AUTH_JWT_SECRET is ${bytes} bytes; HS256 needs at least ${MIN_HS256_SECRET_BYTES} (e.g. openssl rand -base64 32)`,
    );
}

/**
 * The tenant bucket, a quarter of the global one unless set, and below it: a tenant whose share
 * were the whole global bucket could drain it alone, and every other tenant's calls would be
 * refused while it does.
 */
function tenantRateLimit(e: z.infer<typeof GatewayEnv>): { tenantRps: number; tenantBurst: number } {
  const tenantRps = e.RATE_LIMIT_TENANT_RPS ?? e.RATE_LIMIT_GLOBAL_RPS / 4;
  const tenantBurst = e.RATE_LIMIT_TENANT_BURST ?? Math.max(1, Math.floor(e.RATE_LIMIT_GLOBAL_BURST / 4));
  const problems: string[] = [];
  if (tenantRps >= e.RATE_LIMIT_GLOBAL_RPS)
    problems.push(
      'RATE_LIMIT_TENANT_RPS must be below RATE_LIMIT_GLOBAL_RPS (one tenant could drain the global bucket)',
    );
  if (tenantBurst >= e.RATE_LIMIT_GLOBAL_BURST && e.RATE_LIMIT_GLOBAL_BURST > 1)
    problems.push(
      'RATE_LIMIT_TENANT_BURST must be below RATE_LIMIT_GLOBAL_BURST (one tenant could drain the global bucket)',
    );
  if (problems.length) throw new ConfigError(problems);
  return { tenantRps, tenantBurst };
}

/** The console signs in with AUTH_ISSUER's OpenID provider: the issuer must be its http(s) URL. */
function checkConsoleOidc(env: NodeJS.ProcessEnv): void {
  if (!env.CONSOLE_OIDC_CLIENT_ID) return;
  let url: URL | undefined;
  try {
    url = new URL(env.AUTH_ISSUER ?? '');
  } catch {
    // reported below
  }
  if (!url || !['https:', 'http:'].includes(url.protocol))
    throw new ConfigError(
      "CONSOLE_OIDC_CLIENT_ID needs AUTH_ISSUER set to the OpenID provider's issuer URL (its /.well-known/openid-configuration)",
    );
}

/** Every setting of the API and the gateway worker; a ConfigError lists every problem at once. */
export function loadGatewayConfig(env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const parts = gatherConfig({
    env: () => parseEnv(GatewayEnv, env),
    auth: () => checkAuthSecret(env),
    temporal: () => loadTemporalSettings(env),
    version: () => loadWorkerVersion(env, 'TEMPORAL_DEPLOYMENT_NAME', 'agent-gateway'),
    gateFreshness: () => loadGateFreshness(env),
    vault: () => loadVaultConfig(env),
    analytics: () => loadAnalyticsConfig(env),
    receipts: () => loadReceiptConfig(env),
    observability: () => loadObservabilityConfig(env),
    payment: () => loadPaymentConfig(env),
    publicUrl: () => loadPublicUrl(env),
    consoleOidc: () => checkConsoleOidc(env),
  });
  const { env: e, temporal } = parts;
  return {
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    temporal: {
      address: temporal.connection.address,
      namespace: temporal.namespace,
      taskQueue: e.TEMPORAL_TASK_QUEUE,
      connection: temporal.connection,
      version: parts.version,
    },
    auth: {
      jwtSecret: e.AUTH_JWT_SECRET,
      jwksUrl: e.AUTH_JWKS_URL,
      tenantClaim: e.AUTH_TENANT_CLAIM,
      userClaim: e.AUTH_USER_CLAIM,
      issuer: e.AUTH_ISSUER,
      audience: e.AUTH_AUDIENCE,
      scopes: e.AUTH_SCOPES,
      maxTokenAgeSeconds: e.AUTH_MAX_TOKEN_AGE,
      requireExp: e.AUTH_REQUIRE_EXP === 'true',
    },
    upstream: {
      allow: e.UPSTREAM_ALLOW,
      allowHint: e.UPSTREAM_ALLOW_HINT === 'true',
      timeoutMs: e.UPSTREAM_TIMEOUT_MS,
      tenantConnections: e.UPSTREAM_TENANT_CONNECTIONS,
      breakerHalfOpenMs: e.UPSTREAM_BREAKER_HALF_OPEN_MS,
    },
    bodyBudget: { processBytes: e.BODY_INFLIGHT_MAX_BYTES, tenantBytes: e.BODY_INFLIGHT_TENANT_MAX_BYTES },
    startBacklog: { process: e.START_BACKLOG_MAX, tenant: e.START_BACKLOG_TENANT_MAX },
    shutdownGraceMs: e.API_SHUTDOWN_GRACE_MS,
    workflowStartDeadlineMs: e.WORKFLOW_START_DEADLINE_MS,
    streamMarkDeadlineMs: e.STREAM_MARK_DEADLINE_MS,
    bodyPace: {
      timeoutMs: e.BODY_READ_TIMEOUT_MS,
      minBytesPerSecond: e.BODY_MIN_BYTES_PER_S,
      graceMs: e.BODY_RATE_GRACE_MS,
    },
    redisUrl: e.REDIS_URL,
    budgets: {
      everyMs: e.BUDGET_RECONCILE_MS,
      // A /v1 HTTP call reserves at its door, before its body arrives (token-door.ts): a reservation
      // with no row yet may be that old and still admitting, or given back while the call goes on.
      noRowAfterMs: e.BUDGET_NO_ROW_AFTER_MS ?? e.BODY_READ_TIMEOUT_MS + parts.payment.settlementTimeoutMs + 60_000,
    },
    rateLimit: {
      agentRps: e.RATE_LIMIT_AGENT_RPS,
      agentBurst: e.RATE_LIMIT_AGENT_BURST,
      agentMaxRps: e.RATE_LIMIT_AGENT_MAX_RPS,
      agentMaxBurst: e.RATE_LIMIT_AGENT_MAX_BURST,
      ...tenantRateLimit(e),
      globalRps: e.RATE_LIMIT_GLOBAL_RPS,
      globalBurst: e.RATE_LIMIT_GLOBAL_BURST,
    },
    tenantMaxAgents: e.TENANT_MAX_AGENTS,
    gateFreshness: parts.gateFreshness,
    chainRpcUrl: e.CHAIN_RPC_URL,
    logLevel: e.LOG_LEVEL,
    accessLog: { mode: e.ACCESS_LOG, sampleEvery: e.ACCESS_LOG_SAMPLE_EVERY },
    gitCommit: e.GIT_COMMIT,
    publicAddress: { url: parts.publicUrl, trustProxy: e.TRUST_PROXY === 'true' },
    console: {
      dir: e.CONSOLE_DIR ? resolve(e.CONSOLE_DIR) : DEFAULT_CONSOLE_DIR,
      temporalUiUrl: e.TEMPORAL_UI_URL.replace(/\/+$/, ''),
      oidcClientId: e.CONSOLE_OIDC_CLIENT_ID,
    },
    publicAgents: {
      challengeRpsPerClient: e.PUBLIC_CHALLENGE_RPS_PER_CLIENT,
      rpsPerClient: e.PUBLIC_RPS_PER_CLIENT,
      challengeRpsPerTenant: e.PUBLIC_CHALLENGE_RPS,
      payerRps: e.PUBLIC_PAYER_RPS,
      pollRpsPerClient: e.PUBLIC_POLL_RPS_PER_CLIENT,
    },
    discovery: {
      rpsPerClient: e.PUBLIC_DISCOVERY_RPS_PER_CLIENT,
      rps: e.PUBLIC_DISCOVERY_RPS,
      maxAgents: e.PUBLIC_DISCOVERY_MAX_AGENTS,
    },
    vault: parts.vault,
    analytics: parts.analytics,
    receipts: parts.receipts,
    observability: parts.observability,
    payment: parts.payment,
  };
}
