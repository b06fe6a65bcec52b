// Process entry: `node temporal/facilitator-worker-main.ts` (npm start supervises it). The
// only process that decrypts the gas wallet keystore.
import { loadFacilitatorConfig, requireStartFiles } from '../facilitator/config.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitatorOrExit } from '../facilitator/db/migrations.ts';
import { createChainProvider } from '../facilitator/chain.ts';
import { loadKeystoreSignerOrExit } from '../facilitator/signer.ts';
import { createLogger } from '../lib/log.ts';
import { startFacilitatorMetrics } from '../facilitator/metrics.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { installTemporalRuntime } from '../lib/observability/temporal-runtime.ts';
import { prebuiltWorkflowBundle } from './workflow-bundles.ts';
import { createFacilitatorWorker } from './facilitator-worker.ts';
import { requireSearchAttributes } from './search-attribute-setup.ts';
import { runWorkerVersion } from './worker-deployment.ts';

// Every setting checked first: all the mistakes, one line each, exit 2.
const { config, bundle } = await loadConfigOrExit(
  'facilitator-worker',
  () =>
    gatherConfig({
      config: () => {
        const loaded = loadFacilitatorConfig();
        requireStartFiles(loaded, { tls: false, decrypts: true });
        return loaded;
      },
      bundle: () => prebuiltWorkflowBundle('facilitator'),
    }),
  [{ variable: 'FACILITATOR_WORKER_METRICS_PORT', fallback: 9467, hostVariable: 'METRICS_HOST' }],
);
// The gas key, decrypted before anything connects: a wrong password is one line, exit 2.
const signer = await loadKeystoreSignerOrExit('facilitator-worker', config);
const log = createLogger('facilitator-worker', config.logLevel);
const { port: metricsPort, host: metricsHost } = config.workerMetrics;
// The SDK's logs through this logger, its core metrics beside the process's own (before any connection).
const runtime = await installTemporalRuntime({ log, level: config.logLevel, metrics: metricsPort > 0 });
await requireSearchAttributes(config.temporal, log);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitatorOrExit('facilitator-worker', pool, config.databaseUrl);
const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
if (bundle) log.info({ workflowBundle: bundle.file, builtAt: bundle.builtAt }, 'prebuilt workflow bundle');
const { worker, connection } = await createFacilitatorWorker(
  config,
  { pool, provider, signer },
  { workflowBundle: bundle?.workflowBundle },
);
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
// Prometheus scrapes the worker on its own port (FACILITATOR_WORKER_METRICS_PORT; 0 = off).
const metrics = await startFacilitatorMetrics({
  provider,
  gasWallet: signer.address,
  listener: { port: metricsPort, host: metricsHost },
  extra: runtime.coreMetrics,
});
const { taskQueue, version } = config.temporal;
if (version.caution) log.warn({ deployment: version.deploymentName, buildId: version.buildId }, version.caution);
const { running } = await runWorkerVersion(worker, connection, config.temporal, log);
log.info(
  { taskQueue, deployment: version.deploymentName, buildId: version.buildId, gasWallet: signer.address },
  'facilitator worker running',
);
await running;
metrics?.close();
await connection.close();
provider.destroy();
await pool.end();
