// `node bench/echo-worker.ts TEMPORAL_ADDRESS TASK_QUEUE`: the worker of bench/throughput.ts's
// bare baseline, in its own process as the gateway worker is, with the gateway worker's tuning
// (temporal/worker-tuning.ts). Prints `echo worker running` once polling.
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker } from '@temporalio/worker';
import { Agent, request } from 'undici';
import { gatewayActivityGraceMs, workerTuning } from '../temporal/worker-tuning.ts';
import type { EchoActivities } from './echo-workflow.ts';

const [address, taskQueue] = process.argv.slice(2);
const dispatcher = new Agent({ keepAliveTimeout: 10_000, connections: 256 });

const activities: EchoActivities = {
  async echo({ url, body }) {
    const res = await request(url, {
      dispatcher,
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body,
    });
    await res.body.arrayBuffer();
    return res.statusCode;
  },
};

const connection = await NativeConnection.connect({ address });
const worker = await Worker.create({
  connection,
  namespace: 'default',
  taskQueue,
  workflowsPath: fileURLToPath(new URL('./echo-workflow.ts', import.meta.url)),
  activities,
  ...workerTuning(gatewayActivityGraceMs(30_000)),
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => worker.shutdown());
process.stdout.write('echo worker running\n');
await worker.run();
await connection.close();
await dispatcher.close();
