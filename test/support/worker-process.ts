// A real gateway worker PROCESS (temporal/gateway-worker-main.ts) on the stack's database,
// Temporal, vault and allow-list, on a task queue of its own: for tests about what happens
// across processes (a worker killed mid-call, process-level settings such as tracing).
import { spawn, type ChildProcess } from 'node:child_process';
import { stack } from './stack.ts';

/**
 * Starts the worker with `env` on top of the stack's settings; resolves once it is polling.
 * `onOutput` sees everything it writes (stdout and stderr), for tests that read its logs.
 */
export function startWorkerProcess(
  taskQueue: string,
  env: Record<string, string | undefined> = {},
  onOutput: (chunk: string) => void = () => undefined,
): Promise<ChildProcess> {
  const s = stack();
  const child = spawn(process.execPath, ['temporal/gateway-worker-main.ts'], {
    env: {
      ...process.env,
      DATABASE_URL: s.config.databaseUrl,
      TEMPORAL_ADDRESS: s.config.temporal.address,
      TEMPORAL_NAMESPACE: s.config.temporal.namespace,
      TEMPORAL_TASK_QUEUE: taskQueue,
      AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
      UPSTREAM_ALLOW: s.allow.join(','),
      VAULT_ADDR: s.infra.vault.addr,
      VAULT_TOKEN: s.infra.vault.token,
      VAULT_TENANT_ROLE: s.infra.vault.tenantRole,
      VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
      WORKER_METRICS_PORT: '0',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      onOutput(chunk.toString());
      if (output.includes('gateway worker running')) resolve(child);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`worker exited (${code}) before running: ${output.slice(-2000)}`)));
  });
}

export function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((r) => child.once('exit', () => r()));
}

/** SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
export async function stopWorkerProcess(child: ChildProcess, graceMs = 15_000): Promise<void> {
  child.kill('SIGTERM');
  await Promise.race([exited(child), new Promise((r) => setTimeout(r, graceMs))]);
  child.kill('SIGKILL');
}
