// `npm run replay -- FILE [FILE...]`: replays workflow histories exported with
// `temporal workflow show -w ID -o json > FILE` against today's workflow code. Exits non-zero
// on any non-determinism, naming the file. Each history is replayed against the bundle of the
// worker that runs its workflow type: the gateway's (InvocationWorkflow) or the
// facilitator's (SettlementWorkflow, SettlementWatchWorkflow).
import { readFileSync } from 'node:fs';
import { DefaultLogger, Runtime, Worker, bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { gatewayWorkflowsPath } from '../temporal/gateway-worker.ts';
import { facilitatorWorkflowsPath } from '../temporal/facilitator-worker.ts';
import * as gatewayWorkflows from '../workflows/index.ts';
import * as facilitatorWorkflows from '../workflows/facilitator.ts';
import { parseCommand, usageExit } from './lib/cli.ts';

const USAGE = `usage: npm run replay -- [--verbose] FILE [FILE...]
  Replays workflow histories (.tools/venv/bin/temporal workflow show -w ID -o json > FILE, the
  Temporal CLI npm start uses) against the current workflow code, one line per history; exits 1
  when any history does not replay.
  --verbose also prints the SDK's replay worker logs.`;
const { positionals: files, values } = parseCommand({
  usage: USAGE,
  options: { verbose: { type: 'boolean' } },
  allowPositionals: true,
});
if (files.length === 0) usageExit(USAGE, 'name at least one history file');
// The replay worker's own lifecycle lines drown the one line per history, unless asked for.
if (!values.verbose) Runtime.install({ logger: new DefaultLogger('ERROR') });

const silent = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
const workers = [
  { name: 'gateway', path: gatewayWorkflowsPath, types: Object.keys(gatewayWorkflows) },
  { name: 'facilitator', path: facilitatorWorkflowsPath, types: Object.keys(facilitatorWorkflows) },
];
// Bundled on first use: a run over gateway histories only never bundles the facilitator's.
const bundles = new Map<string, Promise<WorkflowBundle>>();
function bundleFor(path: string): Promise<WorkflowBundle> {
  let bundle = bundles.get(path);
  if (!bundle) {
    bundle = bundleWorkflowCode({ workflowsPath: path, logger: silent });
    bundles.set(path, bundle);
  }
  return bundle;
}

type History = { events?: Array<{ workflowExecutionStartedEventAttributes?: { workflowType?: { name?: string } } }> };

function workflowType(history: History): string | undefined {
  return history.events?.[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name;
}

let failed = 0;
for (const file of files) {
  try {
    const history = JSON.parse(readFileSync(file, 'utf8')) as History;
    const type = workflowType(history);
    const worker = workers.find((w) => type !== undefined && w.types.includes(type));
    if (!worker) throw new Error(`no worker runs workflow type ${type ?? '(none: not a workflow history)'}`);
    await Worker.runReplayHistory({ workflowBundle: await bundleFor(worker.path) }, history, file);
    console.log(`ok      ${file} (${type}, ${worker.name})`);
  } catch (err) {
    failed += 1;
    console.log(`FAILED  ${file}: ${(err as Error).message}`);
  }
}
process.exit(failed ? 1 : 0);
