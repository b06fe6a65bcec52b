// `npm run build`: bundles the gateway's and the facilitator's workflow code once, for workers
// that load it instead of bundling at start (NODE_ENV=production or WORKFLOW_BUNDLE_DIR;
// temporal/workflow-bundles.ts), and the web console the API serves at /console (CONSOLE_DIR;
// scripts/lib/console-build.ts). `npm start` and the tests keep bundling the workflows at start
// and build the console when its sources changed.
import { mkdirSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { buildWorkflowBundles, defaultBundleDir } from '../temporal/workflow-bundles.ts';
import { parseCommand, runCommand, UsageError } from './lib/cli.ts';
import { buildConsole, defaultConsoleDir } from './lib/console-build.ts';

const { values } = parseCommand({
  usage: `usage: npm run build [-- --out DIR] [--console-out DIR]
  Bundles the gateway's and the facilitator's workflow code (tracing interceptors included) into
  DIR (default: WORKFLOW_BUNDLE_DIR, else dist/workflows), each bundle with a manifest of the
  sources it was built from. Workers started with NODE_ENV=production (or WORKFLOW_BUNDLE_DIR)
  load these bundles and refuse them once those sources change. Builds the web console the API
  serves at /console into --console-out (default: CONSOLE_DIR, else dist/console).`,
  options: { out: { type: 'string' }, 'console-out': { type: 'string' } },
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
  const consoleDir = resolve(values['console-out'] ?? (process.env.CONSOLE_DIR || defaultConsoleDir));
  const site = await buildConsole(consoleDir);
  console.log(
    `console: ${relative(process.cwd(), site.dir)} (${site.files.length} files, ${Math.round(site.bytes / 1024)} KiB${site.reused ? ', unchanged' : ''})`,
  );
});
