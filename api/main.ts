// Process entry: `node api/main.ts` (npm start supervises it).
import { setTimeout as sleep } from 'node:timers/promises';
import { loadGatewayConfig } from '../gateway/config.ts';
import { openOrm, requireMigratedDatabase } from '../gateway/db/orm.ts';
import { createLogger } from '../lib/log.ts';
import { startGateway } from './wiring.ts';
import { connectClient } from '../temporal/client.ts';
import { requireSearchAttributes } from '../temporal/search-attribute-setup.ts';
import { startTracing, stopTracing, tracingSettings } from '../lib/observability/tracing.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';
import { requireReceiptKeys } from '../gateway/receipts/keys.ts';
import { startMetricsServer } from '../lib/observability/http.ts';
import { flushAccessRecords } from '../lib/observability/access.ts';
import { scheduleStaleStreamSweep } from '../gateway/invocations/stale-streams.ts';
import { createVaultClient } from '../gateway/credentials/vault.ts';
import { openChangeFeed } from '../gateway/db/change-feed.ts';

// Every setting and the listeners' ports checked first: all the mistakes, one line each, exit 2.
const config = await loadConfigOrExit(
  'api',
  () =>
    gatherConfig({
      config: loadGatewayConfig,
      tracing: () => tracingSettings(process.env, 'api'),
      // It signs streaming receipts and publishes the keys: the same folder as the workers'.
      receiptKeys: () => requireReceiptKeys(loadReceiptConfig(process.env)),
    }).config,
  [
    { variable: 'PORT', fallback: 8080, hostVariable: 'HOST' },
    { variable: 'API_METRICS_PORT', fallback: 9466, hostVariable: 'METRICS_HOST' },
  ],
);
// Before the Temporal client and the app are built: they install tracing only when it is on.
startTracing(process.env, 'agent-gateway-api');
const log = createLogger('api', config.logLevel);
await requireMigratedDatabase('api', config.databaseUrl);
const orm = await openOrm(config.databaseUrl);
await requireSearchAttributes(config.temporal, log);
const temporal = await connectClient(config.temporal.connection, config.temporal.namespace);
// The per-process services, built once here and handed to the app; the start relay runs here
// too: every accepted call's workflow is started, whoever accepted it.
const feed = openChangeFeed(orm);
const vaultClient = createVaultClient(config.vault);
const stoppingNow = new AbortController();
const server = await startGateway(config, orm, temporal, log, {
  feed,
  vaultClient,
  relay: true,
  stopping: stoppingNow.signal,
});
// Prometheus scrapes the API on a listener of its own (API_METRICS_PORT on METRICS_HOST; 0 = off).
const { apiMetricsPort, metricsHost } = config.observability;
const metrics = apiMetricsPort ? await startMetricsServer(apiMetricsPort, metricsHost) : null;
scheduleStaleStreamSweep(orm, log);

// A stop (SIGTERM from a supervisor or a rolling update) takes no new connection and lets the
// requests in hand finish, up to API_SHUTDOWN_GRACE_MS; a second signal, or the grace's end, cuts
// what is left.
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return server.closeAllConnections();
    stopping = true;
    log.info({ graceMs: config.shutdownGraceMs }, 'stopping: finishing the requests in hand');
    // Streams that would hold the drain for its whole grace end now (their clients reopen them elsewhere).
    stoppingNow.abort();
    const drained = new Promise<void>((resolve) => server.close(() => resolve()));
    // Keep-alive connections that finish their request are closed as they go idle.
    const idle = setInterval(() => server.closeIdleConnections(), 100);
    void Promise.race([drained, sleep(config.shutdownGraceMs)]).then(() => {
      clearInterval(idle);
      server.closeAllConnections();
      stop();
    });
  });
}

// Said once a stop is handled: a supervisor that signals as soon as it reads this line is heard.
log.info({ port: config.port }, 'gateway API listening');

function stop(): void {
  // Access lines and metrics still queued (ACCESS_LOG=batched or sampled) are written now.
  flushAccessRecords();
  metrics?.close();
  // The streaming calls cut just now record their outcome first (their completions are queued
  // within a few ms); closing the ORM then writes every queued row before its connections go.
  void sleep(100)
    .then(() => Promise.allSettled([temporal.connection.close(), orm.close(), stopTracing()]))
    .then(() => process.exit(0));
}
