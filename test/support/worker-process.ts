// A real gateway worker PROCESS (temporal/gateway-worker-main.ts) on the stack's database,
// Temporal, vault and allow-list, on a task queue of its own: for tests about what happens
// across processes (a worker killed mid-call, process-level settings such as tracing).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'undici';
import { stack } from './stack.ts';
import { createAgent, startProxyApp, waitForRow } from './proxy-helpers.ts';
import type { Invocation } from '../../gateway/db/entities.ts';

/** What a gateway process (API or worker) needs of the stack: database, Temporal, auth, allow-list, vault. */
export function stackProcessEnv(): Record<string, string | undefined> {
  const s = stack();
  return {
    DATABASE_URL: s.config.databaseUrl,
    TEMPORAL_ADDRESS: s.config.temporal.address,
    TEMPORAL_NAMESPACE: s.config.temporal.namespace,
    AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
    UPSTREAM_ALLOW: s.allow.join(','),
    VAULT_ADDR: s.infra.vault.addr,
    VAULT_TOKEN: s.infra.vault.token,
    VAULT_TENANT_ROLE: s.infra.vault.tenantRole,
    VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
    // The chain and the facilitator's CA: the API verifies payments, the worker settles metered charges.
    CHAIN_RPC_URL: s.infra.chainRpcUrl,
    TOKEN_ADDRESS: s.infra.tokenAddress,
    SETTLEMENT_CA_FILE: s.infra.pki.files.ca,
    LOG_LEVEL: 'info',
    // The stack's own build id, fixed for the run (a commit made meanwhile changes nothing).
    TEMPORAL_BUILD_ID: s.config.temporal.version.buildId,
    // The run's prebuilt bundles: a worker that bundled at start would spend seconds of CPU on it.
    WORKFLOW_BUNDLE_DIR: s.bundleDir,
  };
}

/** The worker's environment: the stack's settings, `env` on top. */
function workerEnv(taskQueue: string, env: Record<string, string | undefined>): NodeJS.ProcessEnv {
  return { ...process.env, ...stackProcessEnv(), TEMPORAL_TASK_QUEUE: taskQueue, WORKER_METRICS_PORT: '0', ...env };
}

/**
 * Starts the worker with `env` on top of the stack's settings; resolves once it is polling.
 * `onOutput` sees everything it writes (stdout and stderr), for tests that read its logs.
 */
export function startWorkerProcess(
  taskQueue: string,
  env: Record<string, string | undefined> = {},
  onOutput: (chunk: string) => void = () => undefined,
): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['temporal/gateway-worker-main.ts'], {
    env: workerEnv(taskQueue, env),
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

/** Runs a worker that is expected to refuse to start: its exit code and what it wrote. */
export function refusedWorkerProcess(
  env: Record<string, string | undefined>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['temporal/gateway-worker-main.ts'], {
    env: { ...workerEnv('refused', env), DEBUG: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  // One that starts after all is stopped, and fails the test on its exit code.
  child.stdout.on('data', () => stdout.includes('gateway worker running') && child.kill('SIGKILL'));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stdout, stderr })));
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

/**
 * One transactional call answered by the worker on `taskQueue`: an agent on `upstreamUrl`, a
 * POST through an API that starts its workflows on that queue; resolves with the finished row.
 */
export async function invokeThrough(taskQueue: string, upstreamUrl: string, body = 'hello'): Promise<Invocation> {
  const gateway = await startProxyApp({ temporal: { ...stack().config.temporal, taskQueue } });
  try {
    const token = await stack().token(`tenant-${taskQueue}`);
    const agentId = await createAgent(token, { upstream_url: upstreamUrl });
    const res = await request(`${gateway.url}/v1/proxy/${agentId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body,
    });
    const text = await res.body.text();
    assert.equal(res.statusCode, 202, text);
    const { invocation_id: id } = JSON.parse(text) as { invocation_id: string };
    return await waitForRow(id, undefined, 60_000);
  } finally {
    await gateway.close();
  }
}
