// `node api/main.ts` in a child process the test can kill: the stack's database, Temporal,
// vault, chain, settlement CA and allow-list; resolves once it listens.
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../scripts/lib/ports.ts';
import { stack } from './stack.ts';

/** `node api/main.ts` on the stack's database, Temporal, vault and allow-list; resolves once listening. */
export async function startApiProcess(
  extraEnv: Record<string, string> = {},
): Promise<{ child: ChildProcess; url: string }> {
  const s = stack();
  const port = await freePort();
  const child = spawn(process.execPath, ['api/main.ts'], {
    env: {
      ...process.env,
      PORT: String(port),
      DATABASE_URL: s.config.databaseUrl,
      TEMPORAL_ADDRESS: s.config.temporal.address,
      TEMPORAL_NAMESPACE: s.config.temporal.namespace,
      AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
      UPSTREAM_ALLOW: s.allow.join(','),
      VAULT_ADDR: s.infra.vault.addr,
      VAULT_TOKEN: s.infra.vault.token,
      VAULT_TENANT_ROLE: s.infra.vault.tenantRole,
      VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
      LOG_LEVEL: 'info',
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
  return { child, url: `http://127.0.0.1:${port}` };
}
