// `npm run build`: bundles the gateway's and the facilitator's workflow code once, for workers
// that load it instead of bundling at start (NODE_ENV=production or WORKFLOW_BUNDLE_DIR;
// temporal/workflow-bundles.ts). `npm start` and the tests keep bundling at start.
import { mkdirSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { buildWorkflowBundles, defaultBundleDir } from '../temporal/workflow-bundles.ts';
import { parseCommand, runCommand, UsageError } from './lib/cli.ts';

const { values } = parseCommand({
  usage: `usage: npm run build [-- --out DIR]
  Bundles the gateway's and the facilitator's workflow code (tracing interceptors included) into
  DIR (default: WORKFLOW_BUNDLE_DIR, else dist/workflows), each bundle with a manifest of the
  sources it was built from. Workers started with NODE_ENV=production (or WORKFLOW_BUNDLE_DIR)
  load these bundles and refuse them once those sources change.`,
  options: { out: { type: 'string' } },
});

await runCommand('build', async () => {
  const dir = resolve(values.out ?? (process.env.WORKFLOW_BUNDLE_DIR || defaultBundleDir));
  try {
    mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw new UsageError(`cannot write to ${dir} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  for (const built of await buildWorkflowBundles(dir))
    console.log(
      `${built.name} workflows: ${relative(process.cwd(), built.file)} (${Math.round(built.bytes / 1024)} KiB)`,
    );
});
