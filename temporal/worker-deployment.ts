// Runs a worker as a Temporal Worker Deployment version (lib/worker-version.ts) and makes that
// version the deployment's current one when it should be. A version that is not current gets
// no new workflows, so:
// - a deployment without a current version (the first deploy, every fresh dev server) takes the
//   version of the first worker that polls it; workers racing there all end up satisfied;
// - a new version beside a current one waits for the operator's `set-current-version`
//   (docs/DEPLOYMENT.md, "Upgrading"), unless TEMPORAL_PROMOTE_VERSION=always (`npm start`,
//   the only workers of its deployments) makes it current at once;
// - while it runs, a version that is not current takes over once the current version has no
//   pollers left on its task queues: orchestrators stop the old workers by themselves (a rolling
//   update, a restart in place), and new workflows would otherwise queue for nobody.
// The version only exists once its worker polls, so this runs beside `worker.run()`. A current
// version's new task queue is routed to it a moment after its first poll: the worker counts as
// running once the server lists the queue in the version, so a workflow started then is not
// left waiting for the routing.
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import proto from '@temporalio/proto';
import type { NativeConnection, Worker, WorkerOptions } from '@temporalio/worker';
import { ExponentialBackoff, handleWhen, noJitterGenerator, retry } from 'cockatiel';
import type { Logger } from '../lib/log.ts';
import { gauge } from '../lib/observability/metrics.ts';
import type { WorkerVersion } from '../lib/worker-version.ts';
import type { TemporalWorkerSettings } from '../lib/temporal-connection.ts';

/** What a worker polls and runs as (GatewayConfig.temporal and FacilitatorConfig.temporal). */
export type VersionedQueue = Pick<TemporalWorkerSettings, 'namespace' | 'taskQueue' | 'version'>;

type Service = Pick<NativeConnection, 'workflowService'>;

/** The Worker.create options that make a worker run as `version`. */
export function workerVersioning(version: WorkerVersion): Pick<WorkerOptions, 'workerDeploymentOptions'> {
  return {
    workerDeploymentOptions: {
      version: { deploymentName: version.deploymentName, buildId: version.buildId },
      useWorkerVersioning: true,
      defaultVersioningBehavior: version.behavior,
    },
  };
}

/** The operator's command that makes `version` current. */
function promoteCommand(namespace: string, version: WorkerVersion): string {
  return `temporal worker deployment set-current-version --namespace ${namespace} --deployment-name ${version.deploymentName} --build-id ${version.buildId} --yes`;
}

export type VersionState = {
  /** This worker's version is the deployment's current version. */
  current: boolean;
  /** The build id that is current instead (absent: none, or unknown). */
  currentBuildId?: string;
};

const { RoutingConfigUpdateState, TaskQueueKind, TaskQueueType } = proto.temporal.api.enums.v1;

// gRPC codes that retrying cannot change: a malformed request, no right to manage deployments,
// a server without Worker Deployments.
const FINAL_CODES = new Set<number>([
  status.INVALID_ARGUMENT,
  status.PERMISSION_DENIED,
  status.UNIMPLEMENTED,
  status.UNAUTHENTICATED,
]);
// The queues a version serves: its workflows' and its activities'.
const QUEUE_TYPES = [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY];
// Routing settled: COMPLETED, or UNSPECIFIED from a server that does not report it.
const ROUTING_SETTLED = new Set<number>([
  RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_UNSPECIFIED,
  RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED,
]);

function reason(err: unknown): string {
  const e = err as { details?: string; message?: string };
  return (e.details || e.message || String(err)).split('\n')[0];
}

/**
 * Calls `attempt` until it returns a value, with backoff (50 ms doubling to 1 s), until
 * `deadline` or `signal`: then undefined, with the last error. An error with a final gRPC code
 * ends the attempts at once.
 */
async function retrying<T>(
  attempt: () => Promise<T | undefined>,
  deadline: number,
  signal?: AbortSignal,
): Promise<{ value?: T; error?: unknown }> {
  let error: unknown;
  const open = () => Date.now() < deadline && !signal?.aborted;
  // cockatiel's wait does not end on the signal: unreferenced, it cannot hold a stopping
  // process, and the attempt after it sees the signal and makes no call.
  const policy = retry(
    handleWhen((err) => !FINAL_CODES.has((err as { code?: number }).code ?? -1) && open()).orWhenResult(
      (value) => value === undefined && open(),
    ),
    { backoff: new ExponentialBackoff({ initialDelay: 50, maxDelay: 1_000, generator: noJitterGenerator }) },
  ).dangerouslyUnref();
  try {
    const value = await policy.execute(async () => {
      if (!open()) return undefined;
      try {
        return await attempt();
      } catch (err) {
        error = err;
        throw err;
      }
    }, signal);
    return value === undefined ? { error } : { value };
  } catch (err) {
    return { error: err };
  }
}

/**
 * One round: the deployment's current build id, and this version made current when there is
 * none or `mayReplace(current)` says so. `promoted` when this round made it current.
 */
async function settleRound(
  service: Service,
  { namespace, version }: VersionedQueue,
  mayReplace: (currentBuildId: string) => Promise<boolean>,
): Promise<VersionState & { previousBuildId?: string; promoted?: boolean }> {
  const { deploymentName, buildId } = version;
  const described = await service.workflowService.describeWorkerDeployment({ namespace, deploymentName });
  const current = described.workerDeploymentInfo?.routingConfig?.currentDeploymentVersion?.buildId || undefined;
  if (current === buildId) return { current: true };
  if (current && !(await mayReplace(current))) return { current: false, currentBuildId: current };
  await service.workflowService.setWorkerDeploymentCurrentVersion({
    namespace,
    deploymentName,
    buildId,
    // Another worker making a version current in between fails this call; the next round reads it.
    conflictToken: described.conflictToken,
    // `always` (npm start): this version replaces the previous one whatever queues that one polled.
    ignoreMissingTaskQueues: version.promote === 'always',
  });
  return { current: true, previousBuildId: current, promoted: true };
}

function millis(at: { seconds?: unknown; nanos?: number | null } | null | undefined): number {
  return Number(at?.seconds ?? 0) * 1000 + (at?.nanos ?? 0) / 1e6;
}

/**
 * Whether a worker of `buildId` polled, within `promoteStaleMs`, this worker's task queue or
 * any other queue that version lists (workflows or activities). The server lists a poller for
 * minutes after its worker stopped, with the time of its last poll; a live worker polls again
 * at least every minute, even when idle.
 */
async function polledBy(
  service: Service,
  { namespace, taskQueue, version }: VersionedQueue,
  buildId: string,
): Promise<boolean> {
  const { deploymentName } = version;
  const since = Date.now() - version.promoteStaleMs;
  const described = await service.workflowService.describeWorkerDeploymentVersion({
    namespace,
    deploymentVersion: { deploymentName, buildId },
  });
  const queues = new Set([taskQueue]);
  for (const q of described.workerDeploymentVersionInfo?.taskQueueInfos ?? []) if (q.name) queues.add(q.name);
  for (const name of queues)
    for (const taskQueueType of QUEUE_TYPES) {
      const { pollers } = await service.workflowService.describeTaskQueue({
        namespace,
        taskQueue: { name, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
        taskQueueType,
        reportPollers: true,
      });
      const live = (pollers ?? []).some(
        (p) =>
          p.deploymentOptions?.deploymentName === deploymentName &&
          p.deploymentOptions.buildId === buildId &&
          millis(p.lastAccessTime) >= since,
      );
      if (live) return true;
    }
  return false;
}

/** True once the version lists the task queue (workflows and activities) and its routing is settled. */
async function routed(service: Service, { namespace, taskQueue, version }: VersionedQueue): Promise<true | undefined> {
  const { deploymentName, buildId } = version;
  const [described, deployment] = await Promise.all([
    service.workflowService.describeWorkerDeploymentVersion({
      namespace,
      deploymentVersion: { deploymentName, buildId },
    }),
    service.workflowService.describeWorkerDeployment({ namespace, deploymentName }),
  ]);
  const types = (described.workerDeploymentVersionInfo?.taskQueueInfos ?? [])
    .filter((q) => q.name === taskQueue)
    .map((q) => q.type);
  const settled = ROUTING_SETTLED.has(
    deployment.workerDeploymentInfo?.routingConfigUpdateState ??
      RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_UNSPECIFIED,
  );
  return (QUEUE_TYPES.every((t) => types.includes(t)) && settled) || undefined;
}

/**
 * Makes this worker's version current when the deployment has none (or, with `promote: always`,
 * whatever is current), then waits until the server routes the worker's task queue to it.
 * Retries while the version is not yet known to the server (its worker has not polled) for up
 * to `timeoutMs`; logs the outcome, with the command to run when the version is left waiting or
 * could not be set. Never throws: the worker runs either way. `signal` (the worker stopped)
 * ends the attempts quietly.
 */
async function ensureCurrentVersion(
  connection: Service,
  queue: VersionedQueue,
  log: Logger,
  { timeoutMs = 60_000, signal }: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<VersionState> {
  const { namespace, version } = queue;
  const fields = { deployment: version.deploymentName, buildId: version.buildId, behavior: version.behavior };
  const deadline = Date.now() + timeoutMs;
  const settled = await retrying(
    () => settleRound(connection, queue, async () => version.promote === 'always'),
    deadline,
    signal,
  );
  const state = settled.value;
  if (!state) {
    if (!signal?.aborted)
      log.error(
        { ...fields, reason: reason(settled.error), promote: promoteCommand(namespace, version) },
        'could not make this worker version current: it gets no new workflows until it is promoted',
      );
    return { current: false };
  }
  if (!state.current) {
    log.warn(
      { ...fields, currentBuildId: state.currentBuildId, promote: promoteCommand(namespace, version) },
      'this worker version is not current: it runs the workflows pinned to it and no new ones until promoted',
    );
    return state;
  }
  // Not fatal: the routing follows within moments; a workflow started before waits for it.
  if ((await retrying(() => routed(connection, queue), deadline, signal)).value === undefined && !signal?.aborted)
    log.warn({ ...fields, taskQueue: queue.taskQueue }, 'the task queue is not yet routed to this worker version');
  log.info({ ...fields, previousBuildId: state.previousBuildId }, 'worker deployment version is current');
  return { current: true };
}

// One series per worker version this process runs (a deployment and its build id: one or two
// per process), so an alert can fire on a version left behind: 0 means it gets no new workflows.
const workerVersionCurrent = gauge({
  name: 'worker_version_current',
  help: "1 when this process's worker version is its Worker Deployment's current version, else 0; by deployment and build id",
  labelNames: ['deployment', 'build_id'] as const,
});

function recordCurrent({ deploymentName, buildId }: WorkerVersion, current: boolean): void {
  workerVersionCurrent.set({ deployment: deploymentName, build_id: buildId }, current ? 1 : 0);
}

/**
 * Every `promoteCheckMs` until `signal`: makes this version current when the current one has
 * no live pollers left (its workers were stopped; polledBy), and keeps the
 * worker_version_current gauge. Racing replicas are safe: the conflict token lets one set it,
 * and the others then find their own build id current. Never throws.
 */
async function watchCurrentVersion(service: Service, queue: VersionedQueue, log: Logger, signal: AbortSignal) {
  const { namespace, version } = queue;
  if (!version.promoteCheckMs) return;
  const fields = { deployment: version.deploymentName, buildId: version.buildId };
  let problem: string | undefined;
  while (!signal.aborted) {
    await sleep(version.promoteCheckMs, undefined, { signal, ref: false }).catch(() => undefined);
    if (signal.aborted) return;
    try {
      const state = await settleRound(service, queue, async (current) => !(await polledBy(service, queue, current)));
      recordCurrent(version, state.current);
      problem = undefined;
      // Warn: an operator who sees it unexpectedly (a rollout whose new workers all died, and an
      // old worker that was draining took over again) must know which version now takes new work.
      if (state.promoted)
        log.warn(
          { ...fields, previousBuildId: state.previousBuildId, taskQueue: queue.taskQueue },
          'promoted this worker version: the current version has no pollers left',
        );
    } catch (err) {
      // Once per distinct problem: the next round retries.
      if (!signal.aborted && reason(err) !== problem)
        log.warn(
          { ...fields, reason: reason(err), promote: promoteCommand(namespace, version) },
          'could not check whether this worker version should take over',
        );
      problem = reason(err);
    }
  }
}

/**
 * Starts the worker and, beside it, settles its version (ensureCurrentVersion), then keeps
 * checking it while the worker runs (watchCurrentVersion). `version` resolves once settled
 * (never rejects); `running` is the run's promise.
 */
export function startWorkerVersion(
  worker: Worker,
  connection: Service,
  queue: VersionedQueue,
  log: Logger,
): { running: Promise<void>; version: Promise<VersionState> } {
  const running = worker.run();
  const stopped = new AbortController();
  running.then(
    () => stopped.abort(),
    () => stopped.abort(),
  );
  const version = ensureCurrentVersion(connection, queue, log, { signal: stopped.signal }).then((state) => {
    recordCurrent(queue.version, state.current);
    void watchCurrentVersion(connection, queue, log, stopped.signal);
    return state;
  });
  return { running, version };
}

/**
 * Starts the worker and waits until its version is settled (startWorkerVersion). Resolves with
 * the run's promise and the version's state; rejects when the run fails first.
 */
export async function runWorkerVersion(
  worker: Worker,
  connection: Service,
  queue: VersionedQueue,
  log: Logger,
): Promise<VersionState & { running: Promise<void> }> {
  const { running, version } = startWorkerVersion(worker, connection, queue, log);
  const state = await Promise.race([version, running.then((): VersionState => ({ current: false }))]);
  return { ...state, running };
}
