// Runs a worker as a Temporal Worker Deployment version (lib/worker-version.ts) and makes that
// version the deployment's current one when it should be. A version that is not current gets
// no new workflows, so:
// - a deployment without a current version (the first deploy, every fresh dev server) takes the
//   version of the first worker that polls it; workers racing there all end up satisfied;
// - a new version beside a current one waits for the operator's `set-current-version`
//   (docs/DEPLOYMENT.md, "Upgrading"), unless TEMPORAL_PROMOTE_VERSION=always (`npm start`,
//   the only workers of its deployment) makes it current at once.
// The version only exists once its worker polls, so this runs beside `worker.run()`.
import { setTimeout as sleep } from 'node:timers/promises';
import type { NativeConnection, Worker, WorkerOptions } from '@temporalio/worker';
import type { Logger } from '../lib/log.ts';
import type { WorkerVersion } from '../lib/worker-version.ts';

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
export function promoteCommand(namespace: string, version: WorkerVersion): string {
  return `temporal worker deployment set-current-version --namespace ${namespace} --deployment-name ${version.deploymentName} --build-id ${version.buildId} --yes`;
}

export type VersionState = {
  /** This worker's version is the deployment's current version. */
  current: boolean;
  /** The build id that is current instead (absent: none, or unknown). */
  currentBuildId?: string;
};

// gRPC codes that retrying cannot change: a malformed request, no right to manage deployments,
// a server without Worker Deployments.
const FINAL_CODES = new Set([3, 7, 12, 16]);

function reason(err: unknown): string {
  const e = err as { details?: string; message?: string };
  return (e.details || e.message || String(err)).split('\n')[0];
}

/**
 * Makes this worker's version current when the deployment has none (or, with `promote: always`,
 * whatever is current). Retries while the version is not yet known to the server (its worker
 * has not polled) for up to `timeoutMs`; logs the outcome, with the command to run when the
 * version is left waiting or could not be set. Never throws: the worker runs either way.
 * `signal` (the worker stopped) ends the attempts quietly.
 */
export async function ensureCurrentVersion(
  connection: Pick<NativeConnection, 'workflowService'>,
  namespace: string,
  version: WorkerVersion,
  log: Logger,
  { timeoutMs = 60_000, signal }: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<VersionState> {
  const { deploymentName, buildId } = version;
  const fields = { deployment: deploymentName, buildId, behavior: version.behavior };
  const service = connection.workflowService;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (let delay = 100; Date.now() < deadline; delay = Math.min(delay * 2, 2_000)) {
    if (signal?.aborted) return { current: false };
    try {
      const described = await service.describeWorkerDeployment({ namespace, deploymentName });
      const current = described.workerDeploymentInfo?.routingConfig?.currentDeploymentVersion?.buildId || undefined;
      if (current === buildId) {
        log.info(fields, 'worker deployment version is current');
        return { current: true };
      }
      if (current && version.promote === 'first') {
        log.warn(
          { ...fields, currentBuildId: current, promote: promoteCommand(namespace, version) },
          'this worker version is not current: it runs the workflows pinned to it and no new ones until promoted',
        );
        return { current: false, currentBuildId: current };
      }
      await service.setWorkerDeploymentCurrentVersion({
        namespace,
        deploymentName,
        buildId,
        // Another worker making a version current in between fails this call; the next round reads it.
        conflictToken: described.conflictToken,
        // `always` (npm start): this version replaces the previous one whatever queues that one polled.
        ignoreMissingTaskQueues: version.promote === 'always',
      });
      log.info({ ...fields, previousBuildId: current ?? null }, 'worker deployment version made current');
      return { current: true };
    } catch (err) {
      lastError = err;
      if (FINAL_CODES.has((err as { code?: number }).code ?? -1)) break;
    }
    await sleep(delay, undefined, { signal }).catch(() => undefined);
  }
  log.error(
    { ...fields, reason: reason(lastError), promote: promoteCommand(namespace, version) },
    'could not make this worker version current: it gets no new workflows until it is promoted',
  );
  return { current: false };
}

/**
 * Starts the worker and, once it polls, settles its version (ensureCurrentVersion). Resolves
 * with the run's promise and the version's state; rejects when the run fails first.
 */
export async function runWorkerVersion(
  worker: Worker,
  connection: Pick<NativeConnection, 'workflowService'>,
  namespace: string,
  version: WorkerVersion,
  log: Logger,
): Promise<VersionState & { running: Promise<void> }> {
  const running = worker.run();
  const stopped = new AbortController();
  running.then(
    () => stopped.abort(),
    () => stopped.abort(),
  );
  const state = await Promise.race([
    ensureCurrentVersion(connection, namespace, version, log, { signal: stopped.signal }),
    running.then((): VersionState => ({ current: false })),
  ]);
  return { ...state, running };
}
