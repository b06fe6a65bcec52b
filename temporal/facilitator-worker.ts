// Wires the facilitator worker: task queue `facilitator`, the settlement workflows and their
// activities with their dependencies injected (pool, chain provider, gas wallet signer).
// Returns the fast path too, for a /settle handler in the same process (facilitator/settlement/fast-path.ts).
// No logic lives here.
import { NativeConnection, Worker, type WorkflowBundle } from '@temporalio/worker';
import type pg from 'pg';
import type { JsonRpcProvider } from 'ethers';
import { createSettlementActivities } from '../activities/settlement/index.ts';
import { createSettlementSteps } from '../facilitator/settlement/steps.ts';
import { createFastPath, type FastPath } from '../facilitator/settlement/fast-path.ts';
import { cachedSteps, createRunCache } from '../facilitator/settlement/run-cache.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { TransactionSigner } from '../facilitator/signer.ts';
import { createFeeOracle } from '../facilitator/fees.ts';
import { temporalWorkerTracing } from '../lib/observability/tracing.ts';
import { FACILITATOR_ACTIVITY_GRACE_MS, workerTuning } from './worker-tuning.ts';
import { workflowSources } from './workflow-bundles.ts';
import { workerVersioning } from './worker-deployment.ts';

export const facilitatorWorkflowsPath = workflowSources.facilitator;

export async function createFacilitatorWorker(
  config: FacilitatorConfig,
  deps: { pool: pg.Pool; provider: JsonRpcProvider; signer: TransactionSigner },
  opts: { workflowBundle?: WorkflowBundle; connection?: NativeConnection } = {},
): Promise<{ worker: Worker; connection: NativeConnection; fastPath: FastPath }> {
  const connection = opts.connection ?? (await NativeConnection.connect({ ...config.temporal.connection }));
  const steps = createSettlementSteps({ ...deps, fees: createFeeOracle(deps.provider), config });
  const cache = createRunCache();
  const fastPath = createFastPath(steps, cache);
  // Tracing (when started in this process): the OTel interceptors and the workflow spans' sink.
  const tracing = temporalWorkerTracing();
  const worker = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: facilitatorWorkflowsPath }),
    activities: createSettlementActivities(cachedSteps(steps, cache)),
    interceptors: { activity: tracing.activity, workflowModules: opts.workflowBundle ? [] : tracing.workflowModules },
    sinks: tracing.sinks,
    ...workerTuning(FACILITATOR_ACTIVITY_GRACE_MS),
    ...workerVersioning(config.temporal.version),
  });
  return { worker, connection, fastPath };
}
