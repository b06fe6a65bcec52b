// Process entry: `node temporal/gateway-worker-main.ts` (npm start supervises it).
import { loadGatewayConfig } from '../gateway/config.ts';
import { openOrm, requireMigratedDatabase } from '../gateway/db/orm.ts';
import { createLogger } from '../lib/log.ts';
import { createGatewayWorker } from './gateway-worker.ts';
import { closeRedisClients } from '../gateway/policy/redis.ts';
import { startMetricsServer } from '../lib/observability/http.ts';
import { startTracing, stopTracing, tracingSettings } from '../lib/observability/tracing.ts';
import { connectClient } from './client.ts';
import { requireSearchAttributes } from './search-attribute-setup.ts';
import { ensureRetentionSchedule, loadRetention } from './retention-schedule.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';
import { requireReceiptKeys } from '../gateway/receipts/keys.ts';
import { installTemporalRuntime } from '../lib/observability/temporal-runtime.ts';
import { prebuiltWorkflowBundle } from './workflow-bundles.ts';
import { runWorkerVersion } from './worker-deployment.ts';

// Every setting and the metrics port checked first: all the mistakes, one line each, exit 2.
const { config, retention, bundle } = await loadConfigOrExit(
  'worker',
  () =>
    gatherConfig({
      config: loadGatewayConfig,
      retention: () => loadRetention(process.env),
      tracing: () => tracingSettings(process.env, 'worker'),
      // It signs receipts: a deployment's key folder must hold the keys the APIs publish.
      receiptKeys: () => requireReceiptKeys(loadReceiptConfig(process.env)),
      // NODE_ENV=production (or WORKFLOW_BUNDLE_DIR): the bundle `npm run build` wrote, checked against the sources.
      bundle: () => prebuiltWorkflowBundle('gateway'),
    }),
  [{ variable: 'WORKER_METRICS_PORT', fallback: 9464, hostVariable: 'METRICS_HOST' }],
);
const {
  retentionDays,
  bodyRetentionDays,
  a2aTaskRetentionDays,
  mcpSessionRetentionDays,
  unboundPaymentRetentionMinutes,
} = retention;
// Before the worker is built: it installs the tracing interceptors only when tracing is on.
startTracing(process.env, 'agent-gateway-worker');
const log = createLogger('worker', config.logLevel);
const { workerMetricsPort, metricsHost } = config.observability;
// The SDK's logs through this logger, its core metrics beside the process's own (before any connection).
const runtime = await installTemporalRuntime({ log, level: config.logLevel, metrics: workerMetricsPort > 0 });
await requireSearchAttributes(config.temporal, log);
await requireMigratedDatabase('worker', config.databaseUrl);
const orm = await openOrm(config.databaseUrl);
if (bundle) log.info({ workflowBundle: bundle.file, builtAt: bundle.builtAt }, 'prebuilt workflow bundle');
const { worker, connection } = await createGatewayWorker(config, orm, { workflowBundle: bundle?.workflowBundle });
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
// Prometheus scrapes the worker on its own port (WORKER_METRICS_PORT; 0 = off).
const metrics = workerMetricsPort
  ? await startMetricsServer(workerMetricsPort, metricsHost, runtime.coreMetrics)
  : null;
// Policy decision retention runs on a Temporal Schedule; each worker brings it to the configured
// retention. Not fatal: the worker's own job is invocations, and the next start retries.
await connectClient(config.temporal.connection, config.temporal.namespace)
  .then((client) =>
    ensureRetentionSchedule(client, {
      taskQueue: config.temporal.taskQueue,
      retentionDays,
      bodyRetentionDays,
      a2aTaskRetentionDays,
      mcpSessionRetentionDays,
      unboundPaymentRetentionMinutes,
    }).finally(() => client.connection.close()),
  )
  .then((schedule) =>
    log.info(
      {
        retentionDays,
        bodyRetentionDays,
        a2aTaskRetentionDays,
        mcpSessionRetentionDays,
        unboundPaymentRetentionMinutes,
        schedule,
      },
      'retention schedule (policy decisions, captured bodies, A2A tasks, MCP server sessions, unbound signed payments)',
    ),
  )
  .catch((err: Error) =>
    log.warn({ err: { name: err.name, message: err.message } }, 'policy decision retention schedule not set'),
  );
// Polling starts here; a fresh deployment takes this worker's version as its current one.
const { taskQueue, version } = config.temporal;
if (version.caution) log.warn({ deployment: version.deploymentName, buildId: version.buildId }, version.caution);
const { running } = await runWorkerVersion(worker, connection, config.temporal, log);
log.info({ taskQueue, deployment: version.deploymentName, buildId: version.buildId }, 'gateway worker running');
await running;
metrics?.close();
await connection.close();
await orm.close();
await closeRedisClients();
await stopTracing();
