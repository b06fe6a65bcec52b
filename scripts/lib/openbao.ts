// OpenBao (Vault-compatible) dev server for source=vault credentials. Dev mode keeps
// secrets in memory only: what you write there is gone after a restart.
import { spawn } from 'node:child_process';
import { waitFor } from './ports.ts';
import { stopChild } from '../../temporal/dev-server.ts';

export async function startOpenBao(opts: { binary: string; port: number; rootToken: string; onOutput?: (line: string) => void }) {
  const address = `127.0.0.1:${opts.port}`;
  const child = spawn(opts.binary, ['server', '-dev', `-dev-root-token-id=${opts.rootToken}`, `-dev-listen-address=${address}`, '-log-level=warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, BAO_DEV_ROOT_TOKEN_ID: opts.rootToken, HOME: process.env.HOME ?? '/tmp' },
  });
  // The dev server prints its root token and unseal key at start; never pass those lines on.
  const quiet = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) {
      if (line.trim() && !/token|unseal/i.test(line)) opts.onOutput?.(line);
    }
  };
  child.stdout?.on('data', quiet);
  child.stderr?.on('data', quiet);
  const url = `http://${address}`;
  await waitFor('OpenBao', async () => (await fetch(`${url}/v1/sys/health`)).ok, 30_000);
  return { url, child, stop: () => stopChild(child) };
}
