// OpenBao (Vault-compatible) dev server for source=vault credentials. Dev mode keeps
// secrets in memory only: what you write there is gone after a restart.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { waitFor } from './ports.ts';
import { stopChild } from '../../temporal/dev-server.ts';

export async function startOpenBao(opts: { binary: string; port: number; rootToken: string; onOutput?: (line: string) => void }) {
  const address = `127.0.0.1:${opts.port}`;
  const child = spawn(opts.binary, ['server', '-dev', `-dev-root-token-id=${opts.rootToken}`, `-dev-listen-address=${address}`, '-log-level=warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, BAO_DEV_ROOT_TOKEN_ID: opts.rootToken, HOME: process.env.HOME ?? '/tmp' },
  });
  // The dev server prints its root token and unseal key at start; never pass those lines on
  // (whole lines, so a value cannot come through on a chunk boundary without its label). The
  // last few others are kept for the error should it not come up.
  const recent: string[] = [];
  const quiet = (line: string) => {
    if (!line.trim() || /token|unseal/i.test(line) || line.includes(opts.rootToken)) return;
    opts.onOutput?.(line);
    recent.push(line.trim());
    if (recent.length > 5) recent.shift();
  };
  for (const stream of [child.stdout, child.stderr]) if (stream) createInterface({ input: stream }).on('line', quiet);
  const lastOutput = () => (recent.length ? `; its last output: ${recent.join(' | ')}` : '');
  // A server that exits at start (a port taken, a bad flag) fails at once, saying why, instead
  // of after the readiness timeout ('close': after its output is drained).
  const gone = new AbortController();
  child.once('close', (code, signal) => gone.abort(new Error(`OpenBao exited at start (${signal ?? `code ${code}`})${lastOutput()}`)));
  const url = `http://${address}`;
  try {
    await waitFor('OpenBao', async () => (await fetch(`${url}/v1/sys/health`, { signal: AbortSignal.timeout(2_000) })).ok, 60_000, gone.signal);
  } catch (err) {
    await stopChild(child);
    throw gone.signal.aborted ? err : new Error(`${(err as Error).message}${lastOutput()}`);
  }
  return { url, child, stop: () => stopChild(child) };
}
