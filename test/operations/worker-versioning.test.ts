// Workers run as Temporal Worker Deployment versions (lib/worker-version.ts,
// temporal/worker-deployment.ts), through the real dev server:
// - the stack's gateway and facilitator workers are the current versions of their deployments,
//   named after the package version and commit, and a workflow records the version that ran it;
// - a rolling upgrade with PINNED workflows, on a deployment and task queue of its own: worker
//   processes A (build X, current) and B (build Y) poll the same queue; B does not take over by
//   itself; once promoted with the documented command, a call in flight when B arrived finishes
//   on A and a new call runs on B;
// - the build id's rule: an explicit TEMPORAL_BUILD_ID, else a commit cut to 12 characters,
//   else (no commit known) a hash of the workflow code that changes with that code only;
// - TEMPORAL_PROMOTE_VERSION=always in production comes with a caution the worker logs.
// - a new version takes over by itself once the current version's workers are gone (killed,
//   as an orchestrator's rolling update or restart stops them), and new calls run on it.
import assert from 'node:assert/strict';
import { execFile as execFileCb, execFileSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, rawUpstream, readAll, startProxyApp, waitForRow } from '../support/proxy-helpers.ts';
import { exited, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { startedWorkflow } from '../support/workflows.ts';
import { until } from '../support/facilitator.ts';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { loadWorkerVersion } from '../../lib/worker-version.ts';
import { workflowCodeFiles, workflowCodeHash } from '../../lib/workflow-code-hash.ts';

const execFile = promisify(execFileCb);

const { version: packageVersion } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };

/** What the build id must be, worked out here from package.json and git, not by the code under test. */
function expectedBuildId(): string | RegExp {
  let commit = process.env.GIT_COMMIT?.trim().slice(0, 12);
  try {
    commit ||= execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    commit = undefined;
  }
  return commit
    ? `${packageVersion}+${commit}`
    : new RegExp(`^${packageVersion.replace(/\./g, '\\.')}\\+src-[0-9a-f]{12}$`);
}

async function currentVersion(deploymentName: string): Promise<{ deploymentName?: string; buildId?: string }> {
  const { namespace } = stack().config.temporal;
  const described = await stack().temporal.workflowService.describeWorkerDeployment({ namespace, deploymentName });
  const current = described.workerDeploymentInfo?.routingConfig?.currentDeploymentVersion;
  return { deploymentName: current?.deploymentName ?? undefined, buildId: current?.buildId ?? undefined };
}

/** Waits until `buildId` is current and the server has finished routing the deployment's queues to it. */
async function routedTo(deploymentName: string, buildId: string): Promise<void> {
  const { namespace } = stack().config.temporal;
  await until(
    `routing to ${buildId} completed`,
    async () => {
      const { workerDeploymentInfo: info } = await stack().temporal.workflowService.describeWorkerDeployment({
        namespace,
        deploymentName,
      });
      return (
        info?.routingConfig?.currentDeploymentVersion?.buildId === buildId &&
        info.routingConfigUpdateState === ROUTING_COMPLETED
      );
      // The server propagates routing to its task queue partitions on its own time: slower on a
      // loaded 2-vCPU host than the promotion itself, which gets as long.
    },
    60_000,
  );
}

async function knownBuildIds(deploymentName: string): Promise<string[]> {
  const { namespace } = stack().config.temporal;
  const described = await stack().temporal.workflowService.describeWorkerDeployment({ namespace, deploymentName });
  return (described.workerDeploymentInfo?.versionSummaries ?? []).map((v) => v.deploymentVersion?.buildId ?? '');
}

/** Once the workflow has ended: the version it is on, and the version and worker identity of every task it completed. */
async function ranOn(workflowId: string) {
  const handle = await startedWorkflow(workflowId);
  // The row completes inside the activity; its started and completed events reach the history
  // when the activity's result does: the workflow's end comes after both.
  await handle.result();
  const info = (await handle.describe()).raw.workflowExecutionInfo?.versioningInfo;
  const events = (await handle.fetchHistory()).events ?? [];
  return {
    behavior: info?.behavior,
    deploymentName: info?.deploymentVersion?.deploymentName,
    buildId: info?.deploymentVersion?.buildId,
    taskBuildIds: [
      ...new Set(
        events
          .filter((e) => e.workflowTaskCompletedEventAttributes)
          .map((e) => e.workflowTaskCompletedEventAttributes?.deploymentVersion?.buildId),
      ),
    ],
    activityWorkers: [
      ...new Set(
        events
          .filter((e) => e.activityTaskStartedEventAttributes)
          .map((e) => e.activityTaskStartedEventAttributes?.identity),
      ),
    ],
  };
}

// temporal.api.enums.v1: VersioningBehavior PINNED; RoutingConfigUpdateState COMPLETED.
const PINNED = 1;
const ROUTING_COMPLETED = 2;

describe('workers as Worker Deployment versions', function () {
  this.timeout(180_000);

  it("the stack's workers are their deployments' current versions, and a workflow records the version that ran it", async () => {
    const expected = expectedBuildId();
    const buildId = (await currentVersion('agent-gateway')).buildId ?? '';
    if (typeof expected === 'string') assert.equal(buildId, expected);
    else assert.match(buildId, expected);
    for (const deploymentName of ['agent-gateway', 'agent-gateway-facilitator'])
      assert.deepEqual(await currentVersion(deploymentName), { deploymentName, buildId }, deploymentName);

    const token = await stack().token(`tenant-version-${randomUUID()}`);
    const up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
    try {
      const agent = await createAgent(token, { upstream_url: up.url });
      const res = await call('POST', `/v1/proxy/${agent}`, { token, body: 'which version?' });
      assert.equal(res.status, 202, res.text);
      const id = res.json.invocation_id as string;
      assert.equal((await (await startedWorkflow(id)).result()).status, 'succeeded');
      const ran = await ranOn(id);
      assert.equal(ran.behavior, PINNED);
      assert.equal(ran.deploymentName, 'agent-gateway');
      assert.equal(ran.buildId, buildId);
      assert.deepEqual(ran.taskBuildIds, [buildId]);
    } finally {
      await up.close();
    }
  });

  it('a rolling upgrade: a call in flight finishes on the version that started it, a new one runs on the promoted version', async () => {
    const taskQueue = `upgrade-${randomUUID()}`;
    const deployment = `upgrade-${randomUUID().slice(0, 8)}`;
    const [x, y] = ['1.0.0+aaaaaaa', '1.1.0+bbbbbbb'];
    const workerEnv = (buildId: string) => ({
      TEMPORAL_DEPLOYMENT_NAME: deployment,
      TEMPORAL_BUILD_ID: buildId,
      UPSTREAM_TIMEOUT_MS: '60000',
    });
    // The upstream holds the first call's request until released; answers others at once.
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let arrived!: () => void;
    const heldArrived = new Promise<void>((r) => (arrived = r));
    const up = await rawUpstream((req: IncomingMessage, res: ServerResponse) => {
      void readAll(req).then(async (body) => {
        if (body.toString() === 'held') {
          arrived();
          await released;
        }
        res.end(`answered ${body.toString()}`);
      });
    });
    const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
    const children: ChildProcess[] = [];
    try {
      const token = await stack().token(`tenant-upgrade-${randomUUID()}`);
      const agent = await createAgent(token, { upstream_url: up.url });
      const invoke = async (body: string) => {
        const res = await request(`${gateway.url}/v1/proxy/${agent}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body,
        });
        assert.equal(res.statusCode, 202);
        return ((await res.body.json()) as { invocation_id: string }).invocation_id;
      };

      // A, alone on a new deployment, becomes its current version.
      const a = await startWorkerProcess(taskQueue, workerEnv(x));
      children.push(a);
      assert.deepEqual(await currentVersion(deployment), { deploymentName: deployment, buildId: x });
      const held = await invoke('held');
      await heldArrived;

      // B starts beside it and does not take over by itself.
      let bOutput = '';
      const b = await startWorkerProcess(taskQueue, workerEnv(y), (chunk) => (bOutput += chunk));
      children.push(b);
      assert.match(bOutput, /this worker version is not current/);
      assert.deepEqual(await currentVersion(deployment), { deploymentName: deployment, buildId: x });

      // The operator promotes B (docs/DEPLOYMENT.md, "Upgrading"), once the server knows it.
      await until(`build ${y} known to the deployment`, async () => (await knownBuildIds(deployment)).includes(y));
      const { address, namespace } = stack().config.temporal;
      await until('set-current-version accepted', () =>
        execFile(ensureTool('temporal'), [
          ...['worker', 'deployment', 'set-current-version', '--address', address, '--namespace', namespace],
          ...['--deployment-name', deployment, '--build-id', y, '--yes'],
        ]).then(
          () => true,
          () => false,
        ),
      );
      assert.deepEqual(await currentVersion(deployment), { deploymentName: deployment, buildId: y });
      // The routing follows the promotion a moment later: a call started before could still go to A.
      await routedTo(deployment, y);

      const fresh = await invoke('fresh');
      assert.equal((await waitForRow(fresh, undefined, 60_000)).status, 'succeeded');
      assert.equal((await invocationStatus(held)).status, 'running', 'the first call is still held');
      release();
      assert.equal((await waitForRow(held, undefined, 60_000)).status, 'succeeded');

      const heldRan = await ranOn(held);
      const freshRan = await ranOn(fresh);
      assert.deepEqual(
        { buildId: heldRan.buildId, behavior: heldRan.behavior, tasks: heldRan.taskBuildIds },
        { buildId: x, behavior: PINNED, tasks: [x] },
        'the call in flight stayed on A',
      );
      assert.deepEqual(
        { buildId: freshRan.buildId, behavior: freshRan.behavior, tasks: freshRan.taskBuildIds },
        { buildId: y, behavior: PINNED, tasks: [y] },
        'the new call ran on B',
      );
      assert.deepEqual(heldRan.activityWorkers.map(pidOf), [a.pid], 'A made the held upstream call');
      assert.deepEqual(freshRan.activityWorkers.map(pidOf), [b.pid], 'B made the new upstream call');
    } finally {
      release();
      for (const child of children) await stopWorkerProcess(child);
      await gateway.close();
      await up.close();
    }
  });

  it("a new version takes over by itself once the current version's workers are gone", async () => {
    const taskQueue = `takeover-${randomUUID()}`;
    const deployment = `takeover-${randomUUID().slice(0, 8)}`;
    const [x, y] = ['2.0.0+ccccccc', '2.1.0+ddddddd'];
    const workerEnv = (buildId: string) => ({
      TEMPORAL_DEPLOYMENT_NAME: deployment,
      TEMPORAL_BUILD_ID: buildId,
      TEMPORAL_PROMOTE_VERSION: 'first',
      // Checked twice a second; a poller unseen for 5 s counts as gone (production: 30 s, 2 min).
      TEMPORAL_PROMOTE_CHECK_MS: '500',
      TEMPORAL_PROMOTE_STALE_MS: '5000',
    });
    const up = await rawUpstream((req, res) => void readAll(req).then((body) => res.end(`answered ${body}`)));
    const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
    const children: ChildProcess[] = [];
    try {
      const a = await startWorkerProcess(taskQueue, workerEnv(x));
      children.push(a);
      assert.deepEqual(await currentVersion(deployment), { deploymentName: deployment, buildId: x });

      // A dies without a word, as a node or a rolling update takes it; B starts on its own.
      a.kill('SIGKILL');
      await exited(a);
      let bOutput = '';
      const b = await startWorkerProcess(taskQueue, workerEnv(y), (chunk) => (bOutput += chunk));
      children.push(b);
      assert.match(bOutput, /this worker version is not current/, 'B starts beside the current version X');

      await until(`build ${y} current`, async () => (await currentVersion(deployment)).buildId === y, 60_000);
      await routedTo(deployment, y);
      const promoted = bOutput
        .split('\n')
        .filter((line) => line.includes('promoted this worker version'))
        .map((line) => JSON.parse(line) as { buildId?: string; previousBuildId?: string });
      assert.deepEqual(
        promoted.map((r) => [r.previousBuildId, r.buildId]),
        [[x, y]],
        'B logged taking over from X',
      );

      const token = await stack().token(`tenant-takeover-${randomUUID()}`);
      const agent = await createAgent(token, { upstream_url: up.url });
      const res = await request(`${gateway.url}/v1/proxy/${agent}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'after',
      });
      assert.equal(res.statusCode, 202);
      const { invocation_id: id } = (await res.body.json()) as { invocation_id: string };
      assert.equal((await waitForRow(id, undefined, 60_000)).status, 'succeeded');
      const ran = await ranOn(id);
      assert.deepEqual({ buildId: ran.buildId, tasks: ran.taskBuildIds }, { buildId: y, tasks: [y] });
      assert.deepEqual(ran.activityWorkers.map(pidOf), [b.pid], 'B made the upstream call');
    } finally {
      for (const child of children) await stopWorkerProcess(child);
      await gateway.close();
      await up.close();
    }
  });
});

/** A worker's default identity is `pid@host`. */
function pidOf(identity: string | null | undefined): number {
  return Number(identity?.split('@')[0]);
}

async function invocationStatus(id: string) {
  return waitForRow(id, () => true);
}

describe('the build id and the promotion caution (lib/worker-version.ts)', () => {
  const version = (env: NodeJS.ProcessEnv) => loadWorkerVersion(env, 'TEMPORAL_DEPLOYMENT_NAME', 'agent-gateway');

  it('a commit is cut to 12 characters, so a 40-character SHA and a short one of one commit give one id', () => {
    const sha = 'f3c9a1b27d4e8a0c5b6d7e8f9a0b1c2d3e4f5a6b';
    assert.equal(version({ GIT_COMMIT: sha }).buildId, `${packageVersion}+f3c9a1b27d4e`);
    assert.equal(version({ GIT_COMMIT: sha.slice(0, 12) }).buildId, version({ GIT_COMMIT: sha }).buildId);
    assert.equal(version({ GIT_COMMIT: sha, TEMPORAL_BUILD_ID: 'release-7' }).buildId, 'release-7');
  });

  it('the workflow code hash (the id without a commit) changes with the workflow code and its SDK, not with other code', () => {
    // A copy of the files a bundle is built from, an activity beside them, and the SDK packages' manifests.
    const root = mkdtempSync(join(tmpdir(), 'workflow-code-'));
    const copy = (path: string) => {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      cpSync(path, join(root, path));
    };
    try {
      for (const path of [...workflowCodeFiles(), 'activities/invocation.ts']) copy(path);
      for (const pkg of ['@temporalio/workflow', '@temporalio/common', '@temporalio/interceptors-opentelemetry'])
        copy(`node_modules/${pkg}/package.json`);
      const original = workflowCodeHash(root);
      assert.equal(original, workflowCodeHash(), 'the copy hashes as the checkout does');
      assert.equal(workflowCodeHash(root), original, 'stable across calls');

      writeFileSync(join(root, 'activities/invocation.ts'), '// another activity\n');
      assert.equal(workflowCodeHash(root), original, 'activity code is not workflow code');

      const workflow = join(root, 'workflows/invocation.ts');
      const before = readFileSync(workflow);
      writeFileSync(workflow, `${before.toString()}\n// a change\n`);
      const changed = workflowCodeHash(root);
      assert.notEqual(changed, original, 'a workflow change is a new id');
      writeFileSync(workflow, before);
      assert.equal(workflowCodeHash(root), original);

      mkdirSync(join(root, 'workflows/more'));
      writeFileSync(join(root, 'workflows/more/extra.ts'), 'export {};\n');
      assert.notEqual(workflowCodeHash(root), original, 'a new workflow module is a new id');
      rmSync(join(root, 'workflows/more'), { recursive: true });

      const sdk = join(root, 'node_modules/@temporalio/workflow/package.json');
      writeFileSync(sdk, JSON.stringify({ version: '0.0.0-other' }));
      assert.notEqual(workflowCodeHash(root), original, 'another workflow SDK is a new id');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('TEMPORAL_PROMOTE_VERSION=always in production comes with a caution, nowhere else', () => {
    assert.match(
      version({ TEMPORAL_PROMOTE_VERSION: 'always', NODE_ENV: 'production' }).caution ?? '',
      /TEMPORAL_PROMOTE_VERSION=always in production: .*rolling the deployment back/,
    );
    assert.equal(version({ TEMPORAL_PROMOTE_VERSION: 'always' }).caution, undefined);
    assert.equal(version({ NODE_ENV: 'production' }).caution, undefined);
  });
});
