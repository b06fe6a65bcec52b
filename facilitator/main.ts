// Process entry: `node facilitator/main.ts`. HTTPS with mutual TLS on FACILITATOR_PORT,
// plain HTTP for the read-only endpoints on FACILITATOR_PUBLIC_PORT, and (unless
// FACILITATOR_EMBEDDED_WORKER=false) the facilitator's Temporal worker in the same process, so
// /settle starts its workflow eagerly. More workers can run as separate processes
// (temporal/facilitator-worker-main.ts).
import { loadFacilitatorConfig } from './config.ts';
import { openFacilitatorPool } from './db/pool.ts';
import { migrateFacilitator } from './db/migrations.ts';
import { startFacilitator } from './server.ts';
import { loadKeystoreSigner } from './signer.ts';
import { createLogger } from '../lib/log.ts';
import { connectClient } from '../temporal/client.ts';
import { requireSearchAttributes } from '../temporal/search-attribute-setup.ts';
import { startFacilitatorMetrics } from './metrics.ts';
import { createChainProvider } from './chain.ts';
import { gasWalletAddress, requireTlsFiles } from './config.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { startTracing, stopTracing, tracingSettings } from '../lib/observability/tracing.ts';

// Every setting and the listeners' ports checked first: all the mistakes, one line each, exit 2.
const config = await loadConfigOrExit(
  'facilitator',
  () =>
    gatherConfig({
      config: () => {
        const loaded = loadFacilitatorConfig();
        requireTlsFiles(loaded);
        return loaded;
      },
      tracing: () => tracingSettings(process.env, 'facilitator'),
    }).config,
  [
    { variable: 'FACILITATOR_PORT', fallback: 8443, hostVariable: 'FACILITATOR_HOST' },
    { variable: 'FACILITATOR_PUBLIC_PORT', fallback: 8444, hostVariable: 'FACILITATOR_HOST' },
    { variable: 'FACILITATOR_METRICS_PORT', fallback: 9465, hostVariable: 'METRICS_HOST' },
  ],
);
// Before the Temporal client and the apps are built: they install tracing only when it is on.
startTracing(process.env, 'x402-facilitator');
const log = createLogger('facilitator', config.logLevel);
await requireSearchAttributes(config.temporal, log);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitator(pool);
const temporal = config.embeddedWorker
  ? undefined
  : await connectClient(config.temporal.connection, config.temporal.namespace);
const worker = config.embeddedWorker ? { signer: await loadKeystoreSigner(config) } : undefined;
const running = await startFacilitator(config, { pool, log, temporal, worker });
log.info(
  { url: running.url, publicUrl: running.publicUrl, embeddedWorker: config.embeddedWorker },
  'facilitator listening',
);
const metrics = await startFacilitatorMetrics({
  provider: createChainProvider(config.chainRpcUrl, config.domain.chainId),
  gasWallet: gasWalletAddress(config),
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    metrics?.close();
    void running
      .close()
      .then(() => Promise.allSettled([temporal?.connection.close(), pool.end(), stopTracing()]))
      .then(() => process.exit(0));
  });
}
