// The integration suite in shards run at once (scripts/test.ts), each a process with a stack of its
// own (test/support/shard.ts): the suite mostly waits on services, processes and deadlines (in one
// timed run of all files in one process the mocha process used 251 s of CPU in 16.6 min), so
// shards on the same cores overlap those waits. Files are handed out one at a time, longest first
// by the recorded durations (test/durations.json), to whichever shard is free; each file's report
// is printed as one block when it ends, so shards' lines never interleave.
import { fork } from 'node:child_process';
import { globSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildWorkflowBundles } from '../../temporal/workflow-bundles.ts';

/** The line a shard writes after a file's report; the rest of the line is its result as JSON. */
export const FILE_END = '@@shard-file-end@@';

export type FileResult = {
  file: string;
  passes: number;
  failures: number;
  pending: number;
  wallMs: number;
  cpuMs: number;
  /** Each failed test's full title and the first lines of its error. */
  failed?: string[];
};

/** What a shard process is sent: the next file to run, or that there is none. */
export type ShardOrder = { file: string } | { stop: true };

const SHARD = 'test/support/shard.ts';
const DURATIONS = 'test/durations.json';
/** A file with no recorded duration is placed as if it took this long (about the median). */
const UNKNOWN_SECONDS = 10;
/** How long a shard's output is still read after it exited. */
const STDIO_DRAIN_MS = 2_000;

// The integration suite's files: every test file, in whichever area folder (test/AREA/), but
// those under `layerDirs` (the unit and workflow layers, run with configs of their own).
export function integrationFiles(layerDirs: readonly string[]): string[] {
  return globSync('test/**/*.test.ts')
    .filter((file) => !layerDirs.some((dir) => file.startsWith(dir)))
    .sort();
}

/**
 * What each shard's mocha run takes from the suite's own config (.mocharc.json), not its root
 * hooks or reporter: the per-test timeout, and the refusal of `.only` (a stray one would run
 * that test alone and report its file green).
 */
export function suiteOptions(): { timeout: number; forbidOnly: boolean } {
  const rc = JSON.parse(readFileSync('.mocharc.json', 'utf8')) as { timeout: number; forbidOnly?: boolean };
  return { timeout: rc.timeout, forbidOnly: rc.forbidOnly === true };
}

/** Files, the longest first (by test/durations.json), so the last ones handed out are short. */
export function longestFirst(files: string[], durations: Record<string, number>): string[] {
  const seconds = (file: string) => durations[file] ?? UNKNOWN_SECONDS;
  return [...files].sort((a, b) => seconds(b) - seconds(a) || a.localeCompare(b));
}

function recordedDurations(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(DURATIONS, 'utf8')) as Record<string, number>;
  } catch {
    return {};
  }
}

/**
 * Writes each file's wall time in seconds to test/durations.json (TEST_WRITE_DURATIONS=1), for
 * the next runs' order. A run's own times are measured with the other shards beside it.
 */
function writeDurations(results: FileResult[]): void {
  const durations = Object.fromEntries(
    results
      .map(({ file, wallMs }) => [file, Math.round(wallMs / 100) / 10] as const)
      .sort(([a], [b]) => a.localeCompare(b)),
  );
  writeFileSync(DURATIONS, `${JSON.stringify(durations, null, 2)}\n`); // as Prettier formats it
}

type Report = (result: FileResult, report: string, shard: number) => void;

/**
 * Files only the first shard takes: they need the local PostgreSQL server (the deployment guide's
 * backup and restore use the machine's pg_dump, which the embedded server's newer major version
 * refuses; they skip without it).
 */
const FIRST_SHARD_ONLY = new Set(['test/operations/deployment-guide.test.ts']);

/** Takes the next file shard `index` may run out of `queue`, in the queue's order. */
export function nextFor(index: number, queue: string[]): string | undefined {
  const at = queue.findIndex((file) => index === 1 || !FIRST_SHARD_ONLY.has(file));
  return at < 0 ? undefined : queue.splice(at, 1)[0];
}

/** What the shards share: the files not handed out yet, undefined until the suite may start. */
type Dispatch = { queue: string[] | undefined; idle: Array<() => void> };

/** One shard: takes files from the dispatch until none is left; resolves with what it ran. */
function runShard(index: number, dispatch: Dispatch, bundleDir: string, onResult: Report) {
  return new Promise<FileResult[]>((resolve) => {
    const child = fork(SHARD, [], {
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      // The first shard on the local PostgreSQL when one answers, as a run of one stack; every
      // other an embedded one of its own (test/support/stack.ts): a stack's pools and the
      // processes its tests start open dozens of connections at peaks, and three stacks on one
      // server exceed its default max_connections of 100.
      env: {
        ...process.env,
        TEST_COLOR: process.stdout.isTTY ? '1' : '0',
        TEST_BUNDLE_DIR: bundleDir,
        TEST_OWN_POSTGRES: index === 1 ? '0' : '1',
      },
    });
    const results: FileResult[] = [];
    let current: string | undefined;
    let report = '';
    let pending = '';
    const take = (chunk: Buffer) => {
      pending += chunk.toString();
      let end: number;
      while ((end = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, end + 1);
        pending = pending.slice(end + 1);
        if (line.startsWith(FILE_END)) {
          const result = JSON.parse(line.slice(FILE_END.length)) as FileResult;
          results.push(result);
          onResult(result, report, index);
          report = '';
          current = undefined;
        } else report += line;
      }
    };
    child.stdout!.on('data', take);
    child.stderr!.on('data', (chunk: Buffer) => (report += chunk.toString()));
    const handOut = () => {
      // A shard gone meanwhile (it died while waiting for the suite to start) takes nothing: its
      // file stays in the queue for the others, or is counted failed if none is left to run it.
      if (!child.connected) return;
      current = nextFor(index, dispatch.queue!);
      // A send that fails (the shard dying as it is sent) ends in its exit, which fails `current`.
      child.send((current ? { file: current } : { stop: true }) satisfies ShardOrder, () => undefined);
    };
    // Ready (its stack up, or its last file done): the next file, or wait until the suite may start.
    child.on('message', () => (dispatch.queue ? handOut() : dispatch.idle.push(handOut)));
    // Without a listener an 'error' (the shard could not be signalled) would end the whole run.
    child.on('error', (err) => (report += `shard ${index}: ${err.message}\n`));
    child.once('exit', async (code, signal) => {
      // What it wrote last (its last result, the error it died of) may still be in the pipes at
      // its exit: read to their end, though not waited for long (a process it started and left
      // behind may hold them open).
      await Promise.race([
        Promise.all([finished(child.stdout!), finished(child.stderr!)]).catch(() => undefined),
        sleep(STDIO_DRAIN_MS),
      ]);
      child.stdout!.destroy();
      child.stderr!.destroy();
      report += pending;
      // A shard that died mid-file fails that file; one that never started (its stack did not
      // come up) leaves the queue to the others and counts one failure.
      if (current || code !== 0) {
        const file =
          current ??
          `(shard ${index}: exited ${signal ?? code} ${results.length ? 'after its last file' : 'before running a file'})`;
        const broken = { file, passes: 0, failures: 1, pending: 0, wallMs: 0, cpuMs: 0 };
        results.push(broken);
        onResult(broken, `${report}shard ${index} exited (${signal ?? code}) while running ${file}\n`, index);
      }
      resolve(results);
    });
  });
}

type ShardedRun = { passes: number; failures: number; pending: number; files: FileResult[] };

export type ShardPool = {
  /** Hands `files` out, longest first, and resolves when every shard has stopped. */
  run(files: string[]): Promise<ShardedRun>;
  /** Stops the shards with nothing run (a step before the suite failed). */
  cancel(): Promise<void>;
};

const printReport: Report = (result, report, shard) => {
  const seconds = (result.wallMs / 1000).toFixed(1);
  process.stdout.write(`${report}  [${result.file}: ${seconds} s, ${result.failures} failed, shard ${shard}]\n`);
};

/**
 * The failed tests again, together after the last report: the reports come as the files end,
 * and a log read from its tail (a CI page) would otherwise show only the last failures. Empty
 * when nothing failed.
 */
export function failedList(results: FileResult[]): string {
  const failed = results.filter((r) => r.failures > 0);
  if (failed.length === 0) return '';
  const lines = failed.flatMap(({ file, failures, failed: tests = [] }) => [
    `  ${file} (${failures})`,
    ...tests.map((test) => `    ${test}`),
  ]);
  return `\nfailed:\n${lines.join('\n')}\n`;
}

/**
 * Starts `count` shards, each bringing its stack up at once (while the steps before the suite
 * run), then waiting for `run` to hand out the files.
 */
export async function startShards(count: number): Promise<ShardPool> {
  // The workflow bundles once for all shards (webpack, seconds of CPU each), not once per stack.
  const bundleDir = resolve('.test-data', `bundles-${process.pid}`);
  await buildWorkflowBundles(bundleDir);
  const dispatch: Dispatch = { queue: undefined, idle: [] };
  const shards = Promise.all(
    Array.from({ length: count }, (_, i) => runShard(i + 1, dispatch, bundleDir, printReport)),
  );
  const release = (queue: string[]) => {
    dispatch.queue = queue;
    for (const handOut of dispatch.idle.splice(0)) handOut();
  };
  const stopped = async () => {
    const results = (await shards).flat();
    rmSync(bundleDir, { recursive: true, force: true });
    return results;
  };
  return {
    async run(files) {
      const started = Date.now();
      process.stdout.write(
        `\n> integration tests: ${files.length} files in ${count} shards, each with its own stack\n`,
      );
      const queue = longestFirst(files, recordedDurations());
      release(queue);
      const results = await stopped();
      // Files no shard took (every shard died) count as failed.
      for (const file of queue) results.push({ file, passes: 0, failures: 1, pending: 0, wallMs: 0, cpuMs: 0 });
      if (process.env.TEST_WRITE_DURATIONS === '1') writeDurations(results);
      if (process.env.MOCHA_TIMINGS_FILE) {
        const timings = { totalMs: Date.now() - started, files: Object.fromEntries(results.map((r) => [r.file, r])) };
        writeFileSync(process.env.MOCHA_TIMINGS_FILE, JSON.stringify(timings, null, 1));
      }
      process.stdout.write(failedList(results));
      const sum = (key: 'passes' | 'failures' | 'pending') => results.reduce((total, r) => total + r[key], 0);
      return { passes: sum('passes'), failures: sum('failures'), pending: sum('pending'), files: results };
    },
    async cancel() {
      release([]);
      await stopped();
    },
  };
}
