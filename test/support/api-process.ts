// `node api/main.ts` in a child process the test can kill: the stack's database, Temporal,
// vault, chain, settlement CA and allow-list; resolves once it listens.
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../scripts/lib/ports.ts';
import { stack } from './stack.ts';
import { stackProcessEnv } from './worker-process.ts';

/**
 * `node api/main.ts` on the stack's database, Temporal, vault and allow-list, on `port` (a free
 * one when not given: a restart passes the port it had); resolves once listening.
 */
export async function startApiProcess(
  extraEnv: Record<string, string> = {},
  port?: number,
): Promise<{ child: ChildProcess; url: string; port: number }> {
  const s = stack();
  port ??= await freePort();
  const child = spawn(process.execPath, ['api/main.ts'], {
    env: {
      ...process.env,
      PORT: String(port),
      ...stackProcessEnv(),
      API_METRICS_PORT: '0',
      CHAIN_RPC_URL: s.infra.chainRpcUrl,
      TOKEN_ADDRESS: s.infra.tokenAddress,
      SETTLEMENT_CA_FILE: s.infra.pki.files.ca,
      ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('gateway API listening')) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`API exited (${code}) before listening: ${output.slice(-2000)}`)));
  });
  return { child, url: `http://127.0.0.1:${port}`, port };
}
