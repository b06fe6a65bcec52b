// Process entry: `node facilitator/main.ts`. HTTPS with mutual TLS on FACILITATOR_PORT,
// plain HTTP for the read-only endpoints on FACILITATOR_PUBLIC_PORT. Its Temporal worker is
// a separate process (temporal/facilitator-worker-main.ts), the only one holding the gas key.
import { loadFacilitatorConfig } from './config.ts';
import { openFacilitatorPool } from './db/pool.ts';
import { migrateFacilitator } from './db/migrations.ts';
import { startFacilitator } from './server.ts';
import { createLogger } from '../api/log.ts';
import { connectClient } from '../temporal/client.ts';
import { startFacilitatorMetrics } from '../api/observability/facilitator.ts';
import { createChainProvider } from './chain.ts';
import { gasWalletAddress } from './config.ts';

const config = loadFacilitatorConfig();
const log = createLogger('facilitator', config.logLevel);
const pool = openFacilitatorPool(config.databaseUrl);
await migrateFacilitator(pool);
const temporal = await connectClient(config.temporal.address, config.temporal.namespace);
const running = await startFacilitator(config, { pool, temporal, log });
log.info({ url: running.url, publicUrl: running.publicUrl }, 'facilitator listening');
const metrics = await startFacilitatorMetrics({ provider: createChainProvider(config.chainRpcUrl, config.domain.chainId), gasWallet: gasWalletAddress(config) });

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    metrics?.close();
    void running
      .close()
      .then(() => Promise.allSettled([temporal.connection.close(), pool.end()]))
      .then(() => process.exit(0));
  });
}
