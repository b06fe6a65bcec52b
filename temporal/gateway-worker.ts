// Wires the gateway worker: task queue `gateway`, the invocation, metered-charge, channel-claim and
// budget-alert workflows
// and their activities with their dependencies injected (`vaultClient` when the process shares
// one with its API).
// No logic lives here.
import { NativeConnection, Worker, type WorkflowBundle } from '@temporalio/worker';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createStatementPool } from '../gateway/db/statement-pool.ts';
import {
  createChannelClaimActivities,
  createBudgetAlertActivities,
  createChargeActivities,
  createInvocationActivities,
  createReceiptActivities,
  createRetentionActivities,
} from '../activities/index.ts';
import { createFacilitatorClient } from '../gateway/payment/facilitator-client.ts';
import { activityObservability } from '../activities/observability.ts';
import { temporalWorkerTracing } from '../lib/observability/tracing.ts';
import { createLogger } from '../lib/log.ts';
import { createUpstreamClient } from '../gateway/upstream/client.ts';
import { createOpenCircuits } from '../gateway/upstream/open-circuits.ts';
import { createUpstreamDispatcher } from '../gateway/upstream/dispatcher.ts';
import { queryRows } from '../gateway/db/orm.ts';
import { createPostgresBodyStore } from '../gateway/body-store.ts';
import { createCredentialResolver } from '../gateway/credentials/resolver.ts';
import { createVaultClient, type VaultClient } from '../gateway/credentials/vault.ts';
import type { GatewayConfig } from '../gateway/config.ts';
import { gatewayActivityGraceMs, workerTuning } from './worker-tuning.ts';
import { workflowSources } from './workflow-bundles.ts';
import { workerVersioning } from './worker-deployment.ts';

export const gatewayWorkflowsPath = workflowSources.gateway;

/** How long one delivery of a budget alert may wait for its receiver's answer. */
const BUDGET_ALERT_TIMEOUT_MS = 10_000;

export async function createGatewayWorker(
  config: GatewayConfig,
  orm: MikroORM,
  opts: { workflowBundle?: WorkflowBundle; vaultClient?: VaultClient } = {},
): Promise<{ worker: Worker; connection: NativeConnection }> {
  const connection = await NativeConnection.connect({ ...config.temporal.connection });
  const log = createLogger('worker', config.logLevel);
  const vaultClient = opts.vaultClient ?? createVaultClient(config.vault);
  // One pool of prepared statements for the calls' rows and the channel charges' commits.
  const statements = createStatementPool(orm, 'gateway-worker');
  const activities = createInvocationActivities({
    orm,
    statements,
    upstream: createUpstreamClient({
      allow: config.upstream.allow,
      tenantConnections: config.upstream.tenantConnections,
      breaker: { halfOpenAfterMs: config.upstream.breakerHalfOpenMs },
      // The APIs learn of this worker's open circuits (through Redis, else the database), and
      // refuse paid calls to them before payment.
      circuits: createOpenCircuits({ redisUrl: config.redisUrl, query: queryRows(orm), log }),
    }),
    bodies: createPostgresBodyStore(orm),
    credentials: createCredentialResolver(orm, config.vault, vaultClient),
    upstreamTimeoutMs: config.upstream.timeoutMs,
  });
  // Tracing (when started in this process): the OTel interceptors and the workflow spans' sink.
  // A prebuilt bundle must have been built with `tracing.workflowModules` for workflow spans.
  // One facilitator client for the metered charges and the channel claims (its pools are per target).
  const facilitatorClient = createFacilitatorClient({
    caPem: config.payment.settlementCaPem,
    timeoutMs: config.payment.settlementTimeoutMs,
    allow: config.upstream.allow,
  });
  const settlementDeps = {
    orm,
    log,
    config: { vault: config.vault, payment: config.payment },
    vaultClient,
    statements,
  };
  const tracing = temporalWorkerTracing();
  const worker = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: gatewayWorkflowsPath }),
    activities: {
      ...activities,
      ...createReceiptActivities({ orm, receipts: config.receipts }),
      // Metered charges, settled after their calls through each tenant's facilitator.
      ...createChargeActivities({ ...settlementDeps, client: facilitatorClient }),
      // Batch-settlement channels' claims and settles, through each tenant's facilitator.
      ...createChannelClaimActivities({ ...settlementDeps, client: facilitatorClient }),
      ...createRetentionActivities({ orm }),
      // Budget alerts, POSTed to each budget's webhook_url through the same SSRF guard as upstreams.
      ...createBudgetAlertActivities({
        orm,
        keyring: config.vault.keyring,
        dispatcher: createUpstreamDispatcher({ allow: config.upstream.allow }),
        timeoutMs: BUDGET_ALERT_TIMEOUT_MS,
      }),
    },
    interceptors: {
      activity: [...tracing.activity, activityObservability(log)],
      workflowModules: opts.workflowBundle ? [] : tracing.workflowModules,
    },
    sinks: tracing.sinks,
    ...workerTuning(gatewayActivityGraceMs(config.upstream.timeoutMs)),
    ...workerVersioning(config.temporal.version),
  });
  return { worker, connection };
}
