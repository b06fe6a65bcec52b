// Process entry: `node temporal/facilitator-worker-main.ts` (npm start supervises it). The
// only process that decrypts the gas wallet keystore.
import { loadFacilitatorConfig } from '../facilitator/config.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitatorOrExit } from '../facilitator/db/migrations.ts';
import { createChainProvider } from '../facilitator/chain.ts';
import { loadKeystoreSigner } from '../facilitator/signer.ts';
import { createLogger } from '../lib/log.ts';
import { gatherConfig, loadConfigOrExit } from '../lib/config.ts';
import { installTemporalRuntime } from '../lib/observability/temporal-runtime.ts';
import { prebuiltWorkflowBundle } from './workflow-bundles.ts';
import { createFacilitatorWorker } from './facilitator-worker.ts';
import { requireSearchAttributes } from './search-attribute-setup.ts';

// Every setting checked first: all the mistakes, one line each, exit 2.
const { config, bundle } = await loadConfigOrExit('facilitator-worker', () =>
  gatherConfig({ config: () => loadFacilitatorConfig(), bundle: () => prebuiltWorkflowBundle('facilitator') }),
);
const log = createLogger('facilitator-worker', config.logLevel);
// The SDK's logs through this logger (before any connection). No metrics listener of its own yet.
await installTemporalRuntime({ log, level: config.logLevel, metrics: false });
await requireSearchAttributes(config.temporal, log);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitatorOrExit('facilitator-worker', pool, config.databaseUrl);
const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
const signer = await loadKeystoreSigner(config);
if (bundle) log.info({ workflowBundle: bundle.file, builtAt: bundle.builtAt }, 'prebuilt workflow bundle');
const { worker, connection } = await createFacilitatorWorker(
  config,
  { pool, provider, signer },
  { workflowBundle: bundle?.workflowBundle },
);
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
log.info({ taskQueue: config.temporal.taskQueue, gasWallet: signer.address }, 'facilitator worker running');
await worker.run();
await connection.close();
provider.destroy();
await pool.end();
