// The API started exactly as docs/DEPLOYMENT.md's process table says is the server itself: a
// SIGTERM to the PID the start gave (what a supervisor or an upgrade sends) stops the process
// that holds the port, within API_SHUTDOWN_GRACE_MS. A wrapper (npx, npm exec) would exit on
// the signal and leave the server running with its port.
import assert from 'node:assert/strict';
import { waitFor } from './support/wait.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { freePort } from '../scripts/lib/ports.ts';
import { stack } from './support/stack.ts';
import { stackProcessEnv } from './support/worker-process.ts';

/** The command in the `entry` column of the guide's row for `process`. */
function guideEntry(process: string): string[] {
  const row = readFileSync('docs/DEPLOYMENT.md', 'utf8')
    .split('\n')
    .find((line) => line.startsWith(`| ${process} |`));
  assert.ok(row, `docs/DEPLOYMENT.md has a row for ${process}`);
  const command = /^\| [^|]+\| `([^`]+)` \|/.exec(row)?.[1];
  assert.ok(command, `the ${process} row names its entry`);
  return command.split(' ');
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

describe('a process started as docs/DEPLOYMENT.md says', function () {
  this.timeout(90_000);
  let child: ChildProcess | undefined;
  after(() => {
    // The whole process group: whatever a wrapper might have left behind, too.
    if (child?.pid)
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
  });

  it('the API: SIGTERM to the started PID frees its port within API_SHUTDOWN_GRACE_MS', async () => {
    const s = stack();
    const [command, ...args] = guideEntry('API (one or more replicas)');
    const port = await freePort();
    const graceMs = 5_000;
    child = spawn(command, args, {
      env: {
        ...process.env,
        ...stackProcessEnv(),
        PORT: String(port),
        API_METRICS_PORT: '0',
        API_SHUTDOWN_GRACE_MS: String(graceMs),
        CHAIN_RPC_URL: s.infra.chainRpcUrl,
        TOKEN_ADDRESS: s.infra.tokenAddress,
        SETTLEMENT_CA_FILE: s.infra.pki.files.ca,
      },
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('gateway API listening')) resolve();
      };
      child!.stdout!.on('data', onData);
      child!.stderr!.on('data', onData);
      child!.once('exit', (code) => reject(new Error(`API exited (${code}) before listening: ${output}`)));
    });
    assert.ok(await accepts(port));

    const exited = new Promise<number | null>((resolve) => child!.once('exit', resolve));
    process.kill(child.pid!, 'SIGTERM');
    const code = await exited;
    // The started process is gone; the port must be free by the end of the grace (nothing else
    // may still hold it).
    await waitFor(async () => !(await accepts(port)), { timeoutMs: graceMs, what: `port ${port} to be free` }).catch(
      () => undefined,
    );
    assert.equal(await accepts(port), false, `port ${port} still accepts after the started PID was stopped`);
    assert.equal(code, 0, output);
  });
});
