// The workflow layer's harness: one Temporal time-skipping test server (the Java SDK's, a pinned
// tool in .tools, scripts/lib/tools.ts) per test file, and one bundle of each worker's workflow
// code per run, shared by its files. Each test runs its own Worker on a task queue of its own, its activities replaced by test
// doubles: what is under test here is the workflow's own logic (which steps it orders, what it
// retries and gives up on, what it records in search attributes); the activities' behaviour
// against PostgreSQL, the upstreams and the chain is the integration suite's. The server skips
// timers and retry backoffs whenever nothing but time stands between a workflow and its next step.
import { randomUUID } from 'node:crypto';
import proto from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import {
  DefaultLogger,
  Runtime,
  Worker,
  bundleWorkflowCode,
  makeTelemetryFilterString,
  type WorkflowBundle,
} from '@temporalio/worker';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { ALL_SEARCH_ATTRIBUTES } from '../../temporal/search-attributes.ts';
import { workflowSources, type BundleName } from '../../temporal/workflow-bundles.ts';

const { IndexedValueType } = proto.temporal.api.enums.v1;
const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

export type WorkflowHarness = {
  env: TestWorkflowEnvironment;
  /** Runs `body` while a worker of this bundle serves `activities` on a task queue of its own. */
  withWorker<T>(activities: object, body: (taskQueue: string) => Promise<T>): Promise<T>;
  teardown(): Promise<void>;
};

let runtimeInstalled = false;
// Bundling takes seconds: files of one run that test the same worker's workflows share its bundle.
const bundles = new Map<BundleName, Promise<WorkflowBundle>>();

function bundleOf(name: BundleName): Promise<WorkflowBundle> {
  let bundle = bundles.get(name);
  if (!bundle) {
    bundle = bundleWorkflowCode({ workflowsPath: workflowSources[name], logger: quiet }).then(({ code }) => ({ code }));
    bundles.set(name, bundle);
  }
  return bundle;
}

/** The test server and the `name` worker's workflow bundle, for one test file's before hook. */
export async function workflowHarness(name: BundleName): Promise<WorkflowHarness> {
  // Errors only: every failed attempt of a double would otherwise be logged as a warning.
  if (!runtimeInstalled) {
    Runtime.install({
      logger: new DefaultLogger('ERROR'),
      telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR', other: 'ERROR' }) } },
    });
    runtimeInstalled = true;
  }
  const [env, workflowBundle] = await Promise.all([
    TestWorkflowEnvironment.createTimeSkipping({
      server: { executable: { type: 'existing-path', path: ensureTool('temporal-test-server') } },
    }),
    bundleOf(name),
  ]);
  // Like a fresh cluster, the server knows no custom search attribute until one is added; it
  // cannot list them, so temporal/search-attribute-setup.ts (which lists first) is not used here.
  await env.connection.operatorService.addSearchAttributes({
    namespace: env.namespace ?? 'default',
    searchAttributes: Object.fromEntries(
      ALL_SEARCH_ATTRIBUTES.map((key) => [key.name, IndexedValueType[`INDEXED_VALUE_TYPE_${key.type}`]]),
    ),
  });
  return {
    env,
    async withWorker(activities, body) {
      const taskQueue = `workflow-test-${randomUUID()}`;
      const worker = await Worker.create({ connection: env.nativeConnection, taskQueue, workflowBundle, activities });
      return worker.runUntil(body(taskQueue));
    },
    teardown: () => env.teardown(),
  };
}

/** The search attributes of a workflow as the client's describe reads them (name → value). */
export async function searchAttributesOf(env: TestWorkflowEnvironment, workflowId: string) {
  const described = await env.client.workflow.getHandle(workflowId).describe();
  return Object.fromEntries(described.typedSearchAttributes.getAll().map((pair) => [pair.key.name, pair.value]));
}
