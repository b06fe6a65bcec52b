// `npm run replay -- FILE [FILE...]`: replays workflow histories exported with
// `temporal workflow show -w ID -o json > FILE` against today's workflow code. Exits non-zero
// on any non-determinism, naming the file.
import { readFileSync } from 'node:fs';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { gatewayWorkflowsPath } from '../temporal/gateway-worker.ts';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: npm run replay -- FILE [FILE...]');
  process.exit(2);
}
const workflowBundle = await bundleWorkflowCode({ workflowsPath: gatewayWorkflowsPath, logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} } });
let failed = 0;
for (const file of files) {
  try {
    await Worker.runReplayHistory({ workflowBundle }, JSON.parse(readFileSync(file, 'utf8')), file);
    console.log(`ok      ${file}`);
  } catch (err) {
    failed += 1;
    console.log(`FAILED  ${file}: ${(err as Error).message}`);
  }
}
process.exit(failed ? 1 : 0);
