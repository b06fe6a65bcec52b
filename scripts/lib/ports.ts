// Port helpers: a one-line error for a taken port, and free ports for test runs.
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

export async function assertPortFree(port: number, what: string, envVar: string): Promise<void> {
  if (!(await isPortFree(port))) {
    throw new Error(
      `port ${port} (${what}) is already in use: stop whatever holds it or set ${envVar} to another port`,
    );
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Polls `check` until it answers true, for at most `timeoutMs`, a check in flight included (one
 * can hang on a port that accepts and never answers); `signal` gives up early (its reason is
 * thrown), e.g. when the server being waited for has exited.
 */
export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = 60_000,
  signal?: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const aborted =
    signal &&
    new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
  aborted?.catch(() => undefined);
  while (Date.now() < deadline) {
    signal?.throwIfAborted();
    let timer: NodeJS.Timeout | undefined;
    const outlived = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), deadline - Date.now())));
    try {
      if (await Promise.race([check().catch(() => false), outlived, ...(aborted ? [aborted] : [])])) return;
    } finally {
      clearTimeout(timer);
    }
    await sleep(200);
  }
  throw new Error(`${what} did not become ready within ${Math.round(timeoutMs / 1000)} s`);
}
