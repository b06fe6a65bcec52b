// docs/DEPLOYMENT.md read by the tests that run it: the entry of each process as its table gives
// it, its shell blocks and inline commands as written, and processes started and stopped the
// way the guide tells an operator (the PID started is the one a supervisor signals).
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { waitFor } from './wait.ts';

const GUIDE = 'docs/DEPLOYMENT.md';
const guide = (): string => readFileSync(GUIDE, 'utf8');

/** The command in the `entry` column of the process table's row for `process`. */
function guideEntry(process: string): string[] {
  const row = guide()
    .split('\n')
    .find((line) => line.startsWith(`| ${process} |`));
  assert.ok(row, `${GUIDE} has a row for ${process}`);
  const command = /^\| [^|]+\| `([^`]+)` \|/.exec(row)?.[1];
  assert.ok(command, `the ${process} row names its entry`);
  return command.split(' ');
}

/** The first ```sh block after the line that starts with `heading`, its indentation (a list item's) removed. */
export function guideBlock(heading: string): string {
  const text = guide();
  const at = text.indexOf(`\n${heading}`);
  assert.ok(at >= 0, `${GUIDE} has the heading ${heading}`);
  const block = /\n( *)```sh\n([\s\S]*?)\n *```\n/.exec(text.slice(at));
  assert.ok(block, `a sh block follows ${heading}`);
  const indent = block[1].length;
  return block[2]
    .split('\n')
    .map((line) => line.slice(indent))
    .join('\n');
}

/** The inline code span of the guide that contains `part` (a command given in a sentence). */
export function guideInline(part: string): string {
  const span = guide()
    .match(/`[^`\n]+`/g)
    ?.find((s) => s.includes(part));
  assert.ok(span, `${GUIDE} has an inline command with ${part}`);
  return span.slice(1, -1);
}

/** Runs `script` with sh -e in `cwd`, `env` on top of this process's; its output, or an error with it. */
export function runShell(
  script: string,
  env: Record<string, string | undefined>,
  cwd = process.cwd(),
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) =>
    execFile(
      'sh',
      ['-e', '-c', script],
      { cwd, env: { ...process.env, ...env }, timeout: 120_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${script}\n${stdout}\n${stderr}`)) : resolve({ stdout, stderr }),
    ),
  );
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export type GuideProcess = {
  name: string;
  child: ChildProcess;
  /** The ports it listens on, freed when it stops. */
  ports: number[];
  output(): string;
  exit: Promise<number | null>;
};

/**
 * Starts `process` with the entry its row of the table gives, `env` on top of this process's
 * (in a process group of its own, so a cleanup can reach anything a wrapper left behind);
 * resolves once it has logged `ready` and each of `ports` accepts.
 */
export async function startAsGuideSays(
  process: string,
  env: Record<string, string | undefined>,
  ready: string,
  ports: number[],
): Promise<GuideProcess> {
  const [command, ...args] = guideEntry(process);
  const child = spawn(command, args, {
    env: { ...globalThis.process.env, ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes(ready)) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exit.then((code) => reject(new Error(`${process} exited (${code}) before ready: ${output.slice(-3000)}`)));
  });
  for (const port of ports) await waitFor(() => accepts(port), { what: `${process} on port ${port}` });
  return { name: process, child, ports, output: () => output, exit };
}

/**
 * SIGTERM to the PID that was started; resolves with its exit code and how long until it had
 * exited and none of its ports accepted, failing once `graceMs` (the guide's) has passed.
 */
export async function stopWithin(p: GuideProcess, graceMs: number): Promise<{ code: number | null; ms: number }> {
  const started = Date.now();
  p.child.kill('SIGTERM');
  const code = await Promise.race([
    p.exit,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`${p.name} still running ${graceMs} ms after SIGTERM`)), graceMs).unref(),
    ),
  ]);
  const left = Math.max(graceMs - (Date.now() - started), 0);
  for (const port of p.ports)
    await waitFor(async () => !(await accepts(port)), { timeoutMs: left, what: `${p.name}'s port ${port} to be free` });
  return { code, ms: Date.now() - started };
}

/** SIGKILL to the process group of each still running (a test's cleanup). */
export function killGroups(processes: Array<GuideProcess | undefined>): void {
  for (const p of processes)
    if (p?.child.pid && p.child.exitCode === null && p.child.signalCode === null)
      try {
        globalThis.process.kill(-p.child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
}
