// Process entry: `node temporal/gateway-worker-main.ts` (npm start supervises it).
import { loadGatewayConfig } from '../api/config.ts';
import { openOrm } from '../api/db/orm.ts';
import { createLogger } from '../api/log.ts';
import { createGatewayWorker } from './gateway-worker.ts';

const log = createLogger('worker');
const config = loadGatewayConfig();
const orm = await openOrm(config.databaseUrl);
const { worker, connection } = await createGatewayWorker(config, orm);
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
log.info({ taskQueue: config.temporal.taskQueue }, 'gateway worker running');
await worker.run();
await connection.close();
await orm.close();
