// A throwaway Redis for the test stack's shared limiters: Debian's `redis-server` (any on PATH)
// on a loopback port, its working folder under the run's data folder, nothing persisted (no
// snapshots, no append-only file), stopped with the rest of the infrastructure.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { stopChild } from '../dev/temporal-dev-server.ts';

const READY_TIMEOUT_MS = 30_000;

export async function startRedis(opts: {
  port: number;
  dataDir: string;
  onOutput?: (line: string) => void;
}): Promise<{ url: string; stop(): Promise<void> }> {
  mkdirSync(opts.dataDir, { recursive: true });
  const args = ['--port', String(opts.port), '--bind', '127.0.0.1', '--dir', opts.dataDir];
  const child = spawn('redis-server', [...args, '--save', '', '--appendonly', 'no', '--loglevel', 'notice'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const recent: string[] = []; // kept to explain an early exit in one line
  // Our own server saying it is up, rather than a poll of the port: another process already on
  // that port is never mistaken for it.
  const ready = new Promise<void>((resolve) => {
    for (const stream of [child.stdout, child.stderr])
      createInterface({ input: stream }).on('line', (line) => {
        opts.onOutput?.(line);
        recent.push(line.trim());
        if (recent.length > 5) recent.shift();
        if (line.includes('Ready to accept connections')) resolve();
      });
  });
  let timer: NodeJS.Timeout | undefined;
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (err) =>
      reject(
        new Error(
          (err as NodeJS.ErrnoException).code === 'ENOENT'
            ? 'redis-server is required for the test stack: install it (apt-get install redis-server)'
            : `redis-server: ${err.message}`,
        ),
      ),
    );
    // 'close' rather than 'exit': it fires after the output is drained, so the reason is in `recent`.
    child.once('close', (code, signal) =>
      reject(new Error(`redis-server exited at start (${signal ?? `code ${code}`}): ${recent.join(' | ')}`)),
    );
    timer = setTimeout(
      () => reject(new Error(`redis-server: not ready on port ${opts.port} after ${READY_TIMEOUT_MS} ms`)),
      READY_TIMEOUT_MS,
    );
  });
  failed.catch(() => undefined); // after a successful start a later exit is the owner's business
  try {
    await Promise.race([ready, failed]);
  } catch (err) {
    await stopChild(child);
    throw err;
  } finally {
    clearTimeout(timer);
  }
  return { url: `redis://127.0.0.1:${opts.port}`, stop: () => stopChild(child) };
}
