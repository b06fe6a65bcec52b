// Process entry: `node temporal/facilitator-worker-main.ts` (npm start supervises it). The
// only process that decrypts the gas wallet keystore.
import { loadFacilitatorConfig } from '../facilitator/config.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitator } from '../facilitator/db/migrations.ts';
import { createChainProvider } from '../facilitator/chain.ts';
import { loadKeystoreSigner } from '../facilitator/signer.ts';
import { createLogger } from '../lib/log.ts';
import { loadConfigOrExit } from '../lib/config.ts';
import { createFacilitatorWorker } from './facilitator-worker.ts';
import { requireSearchAttributes } from './search-attribute-setup.ts';
import { runWorkerVersion } from './worker-deployment.ts';

// Every setting checked first: all the mistakes, one line each, exit 2.
const config = await loadConfigOrExit('facilitator-worker', () => loadFacilitatorConfig());
const log = createLogger('facilitator-worker', config.logLevel);
await requireSearchAttributes(config.temporal, log);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitator(pool);
const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
const signer = await loadKeystoreSigner(config);
const { worker, connection } = await createFacilitatorWorker(config, { pool, provider, signer });
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
const { taskQueue, version } = config.temporal;
const { running } = await runWorkerVersion(worker, connection, config.temporal, log);
log.info(
  { taskQueue, deployment: version.deploymentName, buildId: version.buildId, gasWallet: signer.address },
  'facilitator worker running',
);
await running;
await connection.close();
provider.destroy();
await pool.end();
