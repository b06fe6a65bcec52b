// Wires the facilitator worker: task queue `facilitator`, the settlement workflows and their
// activities with their dependencies injected (pool, chain provider, gas wallet signer).
// Returns the activities' runner too, for a /settle handler in the same process (the outbox).
// No logic lives here.
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, type WorkflowBundle } from '@temporalio/worker';
import type pg from 'pg';
import type { JsonRpcProvider } from 'ethers';
import { createSettlementSteps, type SettlementRunner } from '../activities/settlement/index.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { TransactionSigner } from '../facilitator/signer.ts';
import { createFeeOracle } from '../facilitator/fees.ts';
import { temporalWorkerTracing } from '../lib/observability/tracing.ts';
import { workerTuning } from './worker-tuning.ts';

export const facilitatorWorkflowsPath = fileURLToPath(new URL('../workflows/facilitator.ts', import.meta.url));

export async function createFacilitatorWorker(
  config: FacilitatorConfig,
  deps: { pool: pg.Pool; provider: JsonRpcProvider; signer: TransactionSigner },
  opts: { workflowBundle?: WorkflowBundle; connection?: NativeConnection } = {},
): Promise<{ worker: Worker; connection: NativeConnection; runner: SettlementRunner }> {
  const connection = opts.connection ?? (await NativeConnection.connect({ ...config.temporal.connection }));
  const steps = createSettlementSteps({ ...deps, fees: createFeeOracle(deps.provider), config });
  // Tracing (when started in this process): the OTel interceptors and the workflow spans' sink.
  const tracing = temporalWorkerTracing();
  const worker = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: facilitatorWorkflowsPath }),
    activities: steps.activities,
    interceptors: { activity: tracing.activity, workflowModules: tracing.workflowModules },
    sinks: tracing.sinks,
    ...workerTuning,
  });
  return { worker, connection, runner: steps.runner };
}
