// Process entry: `node facilitator-service/main.ts`. HTTPS with mutual TLS on FACILITATOR_PORT,
// plain HTTP for the read-only endpoints on FACILITATOR_PUBLIC_PORT, and (unless
// FACILITATOR_EMBEDDED_WORKER=false) the facilitator's Temporal worker in the same process, so
// /settle starts its workflow eagerly. More workers can run as separate processes
// (temporal/facilitator-worker-main.ts).
import { loadFacilitatorConfig } from '../facilitator/config.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitatorOrExit } from '../facilitator/db/migrations.ts';
import { startFacilitator } from './server.ts';
import { loadKeystoreSignerOrExit } from '../facilitator/signer.ts';
import { createLogger } from '../lib/log.ts';
import { connectClient } from '../temporal/client.ts';
import { requireSearchAttributes } from '../temporal/search-attribute-setup.ts';
import { startFacilitatorMetrics } from '../facilitator/metrics.ts';
import { createChainProvider } from '../facilitator/chain.ts';
import { readKeystore, requireStartFiles } from '../facilitator/config.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { startTracing, stopTracing, tracingSettings } from '../lib/observability/tracing.ts';
import { installTemporalRuntime } from '../lib/observability/temporal-runtime.ts';
import { prebuiltWorkflowBundle } from '../temporal/workflow-bundles.ts';

// Every setting and the listeners' ports checked first: all the mistakes, one line each, exit 2.
const { config, bundle } = await loadConfigOrExit(
  'facilitator',
  () =>
    gatherConfig({
      config: () => {
        const loaded = loadFacilitatorConfig();
        requireStartFiles(loaded, { tls: true, decrypts: loaded.embeddedWorker });
        return loaded;
      },
      tracing: () => tracingSettings(process.env, 'facilitator'),
      // The embedded worker's prebuilt bundle, when NODE_ENV=production (or WORKFLOW_BUNDLE_DIR) asks for one.
      bundle: () =>
        process.env.FACILITATOR_EMBEDDED_WORKER === 'false' ? undefined : prebuiltWorkflowBundle('facilitator'),
    }),
  [
    { variable: 'FACILITATOR_PORT', fallback: 8443, hostVariable: 'FACILITATOR_HOST' },
    { variable: 'FACILITATOR_PUBLIC_PORT', fallback: 8444, hostVariable: 'FACILITATOR_HOST' },
    { variable: 'FACILITATOR_METRICS_PORT', fallback: 9465, hostVariable: 'METRICS_HOST' },
  ],
);
// The embedded worker's gas key, decrypted before anything connects: a wrong password is one line, exit 2.
const signer = config.embeddedWorker ? await loadKeystoreSignerOrExit('facilitator', config) : undefined;
// Before the Temporal client and the apps are built: they install tracing only when it is on.
startTracing(process.env, 'x402-facilitator');
const log = createLogger('facilitator', config.logLevel);
// The embedded worker's SDK: its logs through this logger, its core metrics on the metrics listener.
const runtime = config.embeddedWorker
  ? await installTemporalRuntime({ log, level: config.logLevel, metrics: process.env.FACILITATOR_METRICS_PORT !== '0' })
  : undefined;
await requireSearchAttributes(config.temporal, log);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitatorOrExit('facilitator', pool, config.databaseUrl);
const temporal = config.embeddedWorker
  ? undefined
  : await connectClient(config.temporal.connection, config.temporal.namespace);
if (bundle) log.info({ workflowBundle: bundle.file, builtAt: bundle.builtAt }, 'prebuilt workflow bundle');
const { version } = config.temporal;
if (config.embeddedWorker && version.caution)
  log.warn({ deployment: version.deploymentName, buildId: version.buildId }, version.caution);
const worker = signer ? { signer, workflowBundle: bundle?.workflowBundle } : undefined;
// An embedded worker that fails takes the process with it: an HTTPS process whose settlements'
// workflows nobody runs must not go on taking /settle; its supervisor restarts it.
const running = await startFacilitator(config, { pool, log, temporal, worker, onWorkerFailure: () => process.exit(1) });
log.info(
  { url: running.url, publicUrl: running.publicUrl, embeddedWorker: config.embeddedWorker },
  'facilitator listening',
);
const metrics = await startFacilitatorMetrics({
  provider: createChainProvider(config.chainRpcUrl, config.domain.chainId),
  gasWallet: readKeystore(config).address,
  extra: runtime?.coreMetrics,
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
