// `npm run replay -- FILE [FILE...]`: replays workflow histories exported with
// `temporal workflow show -w ID -o json > FILE` against today's workflow code. Exits 1 on any
// history that does not replay (non-determinism, or a workflow type no worker runs), naming the
// file. A file that is not a workflow history at all (a glob that also took package.json) is
// skipped with a line of its own, so it never reads as a history that failed; a run in which no
// file was a history exits 2, since it checked nothing. Each history is replayed against the
// bundle of the worker that runs its workflow type: the gateway's (InvocationWorkflow) or the
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
  Temporal CLI npm start uses) against the current workflow code, one line per file:
    ok       FILE  replays
    FAILED   FILE  does not replay (or no worker runs its workflow type): exit 1
    skipped  FILE  not a workflow history (not JSON, or no workflow start event); not a failure
  Exits 2 when no file was a history. Keep histories in a folder of their own (histories/*.json).
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

/** The history in a file, or why the file is not one (never a replay failure). */
function readHistory(file: string): { history: History; type: string } | { notHistory: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { notHistory: code ? `cannot read it (${code})` : 'not JSON' };
  }
  const history = parsed as History;
  const type = Array.isArray(history?.events)
    ? history.events[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name
    : undefined;
  if (typeof type !== 'string') return { notHistory: 'no workflow start event' };
  return { history, type };
}

let failed = 0;
let replayed = 0;
for (const file of files) {
  const read = readHistory(file);
  if ('notHistory' in read) {
    console.log(`skipped ${file}: not a workflow history (${read.notHistory})`);
    continue;
  }
  replayed += 1;
  const { history, type } = read;
  try {
    const worker = workers.find((w) => w.types.includes(type));
    if (!worker) throw new Error(`no worker runs workflow type ${type}`);
    await Worker.runReplayHistory({ workflowBundle: await bundleFor(worker.path) }, history, file);
    console.log(`ok      ${file} (${type}, ${worker.name})`);
  } catch (err) {
    failed += 1;
    console.log(`FAILED  ${file}: ${(err as Error).message}`);
  }
}
if (replayed === 0) {
  process.stderr.write(`replay: none of the ${files.length} file(s) is a workflow history; nothing was replayed\n`);
  process.exit(2);
}
process.exit(failed ? 1 : 0);
