// `npm test`: type checking, lint, formatting (Prettier), the layer rules (.dependency-cruiser.cjs), unused
// dependencies, files and exports (knip.jsonc), then the unit layer (test/unit/, no services), the
// workflow layer (test/workflows/, Temporal's time-skipping test server only) and the whole mocha
// suite against real services. Always ends with one plain line `N passed, N failed, N skipped`
// (the layers' counts summed, or a failed step's).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { integrationFiles, startShards, type ShardPool } from './lib/shards.ts';

/**
 * Shards of the integration suite run at once (TEST_SHARDS). On the 2-core test machine, quiet,
 * the whole of `npm test` took 408 s with 3 shards (2026-11-28 14:03, a checkout of main, CI=true;
 * 16-18 min in one process), the machine 73 % busy over the run (/proc/stat).
 */
const DEFAULT_SHARDS = 3;
const USAGE = `usage: npm test [-- FILE...]
  Type check (tsc --noEmit), lint (eslint), formatting (Prettier --check), the layer rules
  (dependency-cruiser) and unused dependencies, files and exports (knip), then the unit layer
  (test/unit/, no services), the workflow layer (test/workflows/, the workflows on Temporal's
  time-skipping test server with their activities as test doubles; a failure in either stops
  the run) and the other test/**/*.test.ts against real services, in TEST_SHARDS processes at
  once (default ${DEFAULT_SHARDS}; TEST_SHARDS=1: one mocha process), each with a stack of its own. With FILEs, mocha over those only (other
  arguments go to mocha as they are) against one stack (FILEs all under test/unit/ or all
  under test/workflows/: with that layer's config, without it). Ends with one line:
  N passed, N failed, N skipped (the layers summed).`;
// --help runs nothing: the steps below take minutes.
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}

/** A step whose output goes straight to ours; resolves with whether it exited 0. */
function step(name: string, command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  process.stdout.write(`\n> ${name}: ${command} ${args.join(' ')}\n`);
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: 'inherit', env });
    child.once('error', () => resolve(false));
    child.once('close', (code) => resolve(code === 0));
  });
}

type Counts = { passes: number; failures: number; pending: number };

/**
 * One mocha run; its reporter (test/support/summary-reporter.cjs) writes the counts to a file
 * instead of its closing line. A run that ended without counts, or failed with none counted
 * (mocha itself broke), counts as one failure.
 */
async function mochaRun(name: string, args: string[]): Promise<Counts> {
  const dir = mkdtempSync(join(tmpdir(), 'npm-test-'));
  const file = join(dir, 'counts.json');
  const ok = await step(name, process.execPath, [bin('mocha'), ...args], { ...process.env, MOCHA_SUMMARY_FILE: file });
  let counts: Counts | undefined;
  try {
    counts = JSON.parse(readFileSync(file, 'utf8')) as Counts;
  } catch {
    // no counts: the run broke before its end (exit code 0 too: a test that called process.exit)
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (!counts) return { passes: 0, failures: 1, pending: 0 };
  return ok || counts.failures > 0 ? counts : { ...counts, failures: counts.failures + 1 };
}

function finish(runs: Counts[]): never {
  const sum = (key: keyof Counts) => runs.reduce((total, run) => total + run[key], 0);
  process.stdout.write(`${sum('passes')} passed, ${sum('failures')} failed, ${sum('pending')} skipped\n`);
  process.exit(sum('failures') === 0 ? 0 : 1);
}

const bin = (tool: string) => `node_modules/.bin/${tool}`;

type Check = { name: string; tool: string; args: string[]; failed: string };

/** One static check in a process of its own; what it wrote (stdout and stderr, interleaved) kept for its turn. */
function runCheck(check: Check): Promise<{ check: Check; ok: boolean; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(bin(check.tool), check.args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    for (const stream of [child.stdout, child.stderr]) stream.on('data', (chunk: Buffer) => (output += chunk));
    child.once('error', (err) => resolve({ check, ok: false, output: `${output}${err.message}\n` }));
    child.once('close', (code) => resolve({ check, ok: code === 0, output }));
  });
}
/** Every folder of code, production and tooling: the layer rules (.dependency-cruiser.cjs) say what may import what. */
const LAYERED = [
  'lib',
  'x402',
  'gateway',
  'activities',
  'workflows',
  'temporal',
  'api',
  'facilitator',
  'facilitator-service',
  'contracts',
  'scripts',
  'bench',
  'examples',
  'console',
  'test',
];
// The static checks run at once, each its own process, and report in this order: on the 2-core
// test machine the five others take ~150 s one after another and ~80 s together (measured beside other
// test runs; tsc, the longest, alone is ~60 s); the console's type check adds ~2 s of CPU. The
// first that fails, in this order, ends the run.
const CHECKS: Check[] = [
  { name: 'type check', tool: 'tsc', args: ['--noEmit', '-p', '.'], failed: 'type check failed' },
  // The web console is browser code (the DOM's types, JSX): a project of its own.
  {
    name: 'console type check',
    tool: 'tsc',
    args: ['--noEmit', '-p', 'console'],
    failed: 'type check of the console (console/tsconfig.json) failed',
  },
  { name: 'lint', tool: 'eslint', args: ['.'], failed: 'lint failed' },
  {
    name: 'format',
    tool: 'prettier',
    args: ['--check', '--log-level', 'warn', '.'],
    failed: 'formatting differs from Prettier (npm run format fixes it)',
  },
  {
    name: 'layers',
    tool: 'depcruise',
    args: ['--config', '.dependency-cruiser.cjs', '--output-type', 'err', ...LAYERED],
    failed: 'layer rules broken',
  },
  // knip.jsonc: no unused dependency, file or export, nothing imported that package.json does not list.
  {
    name: 'unused',
    tool: 'knip',
    args: ['--no-progress'],
    failed: 'unused dependencies, files or exports (knip.jsonc)',
  },
];
/** The layers that start no stack, in the order they run, each with its own mocha config. */
const LAYERS = [
  { name: 'unit tests', dir: 'test/unit/' },
  { name: 'workflow tests', dir: 'test/workflows/' },
] as const;
const config = (dir: string) => ['--config', `${dir}.mocharc.json`];
const args = process.argv.slice(2);
// The integration suite in shards run at once, each with its own stack (scripts/lib/shards.ts),
// their stacks coming up while the steps before the suite run; TEST_SHARDS=1 runs it as one
// mocha process over one stack.
const shards = Number(process.env.TEST_SHARDS ?? DEFAULT_SHARDS);
if (!Number.isInteger(shards) || shards < 1) {
  // A usage error, as the other commands report one: one line on stderr, exit 2, nothing run.
  process.stderr.write(`npm test: TEST_SHARDS must be a whole number of at least 1, not ${process.env.TEST_SHARDS}\n`);
  process.exit(2);
}
const checks = Promise.all(CHECKS.map(runCheck));
const pool: Promise<ShardPool> | undefined = args.length === 0 && shards > 1 ? startShards(shards) : undefined;
// (Awaited below; a failure to start is reported there, not as an unhandled rejection meanwhile.)
pool?.catch(() => undefined);

/** Ends the run with nothing more to run: the shards' stacks stopped first. */
async function stopEarly(runs: Counts[]): Promise<never> {
  await pool?.then((started) => started.cancel()).catch(() => undefined);
  finish(runs);
}

for (const { check, ok, output } of await checks) {
  process.stdout.write(`\n> ${check.name}: ${bin(check.tool)} ${check.args.join(' ')}\n${output}`);
  if (!ok) {
    process.stdout.write(`${check.failed}\n`);
    await stopEarly([{ passes: 0, failures: 1, pending: 0 }]);
  }
}
// `npm test -- test/proxy/proxy.test.ts` runs that file only (still one stack); files all under one of
// LAYERS' folders run with that layer's config, without one.
if (args.length > 0) {
  const files = args.filter((arg) => arg.endsWith('.ts')).map((file) => file.replace(/^\.\//, ''));
  const layer = LAYERS.find(({ dir }) => files.length > 0 && files.every((file) => file.startsWith(dir)));
  finish([await mochaRun('tests', layer ? [...config(layer.dir), ...args] : args)]);
}
// The unit layer first (seconds, no services), then the workflow layer (seconds, the test server
// only). A failure in either is a fault in the logic the whole suite stands on, so the suite's
// minutes are not spent on it.
const runs: Counts[] = [];
for (const { name, dir } of LAYERS) {
  const run = await mochaRun(name, [...config(dir), `${dir}**/*.test.ts`]);
  runs.push(run);
  if (run.failures > 0) await stopEarly(runs);
}
const integration = integrationFiles(LAYERS.map(({ dir }) => dir));
async function sharded(pool: Promise<ShardPool>): Promise<Counts> {
  try {
    return await (await pool).run(integration);
  } catch (err) {
    process.stdout.write(`the shards did not start: ${(err as Error).stack ?? err}\n`);
    return { passes: 0, failures: 1, pending: 0 };
  }
}
finish([...runs, pool ? await sharded(pool) : await mochaRun('integration tests', integration)]);
