// OpenBao (Vault-compatible) dev server for source=vault credentials. Dev mode keeps
// secrets in memory only: what you write there is gone after a restart.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { waitFor } from './ports.ts';
import { stopChild } from '../dev/temporal-dev-server.ts';

export async function startOpenBao(opts: {
  binary: string;
  port: number;
  rootToken: string;
  onOutput?: (line: string) => void;
}) {
  const address = `127.0.0.1:${opts.port}`;
  const child = spawn(
    opts.binary,
    ['server', '-dev', `-dev-root-token-id=${opts.rootToken}`, `-dev-listen-address=${address}`, '-log-level=warn'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, BAO_DEV_ROOT_TOKEN_ID: opts.rootToken, HOME: process.env.HOME ?? '/tmp' },
    },
  );
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
  child.once('close', (code, signal) =>
    gone.abort(new Error(`OpenBao exited at start (${signal ?? `code ${code}`})${lastOutput()}`)),
  );
  const url = `http://${address}`;
  try {
    await waitFor(
      'OpenBao',
      async () => (await fetch(`${url}/v1/sys/health`, { signal: AbortSignal.timeout(2_000) })).ok,
      60_000,
      gone.signal,
    );
  } catch (err) {
    await stopChild(child);
    throw gone.signal.aborted ? err : new Error(`${(err as Error).message}${lastOutput()}`);
  }
  return { url, child, stop: () => stopChild(child) };
}

/** The role every per-tenant child token is minted through, and the policies behind it. */
const TENANT_ROLE = 'gateway-tenant';

/**
 * Sets up the production layout on the dev server (docs/CATALOG.md): a templated policy that
 * lets a token read only `<mount>/data/<tenant path>/*` of the tenant its identity alias names,
 * a token role minting such tokens (alias = tenant id), and a gateway token that can do
 * nothing but mint through that role. Returns the gateway token; the root token stays here
 * (and with the tests, which write secrets as an operator would).
 */
export async function configureTenantAccess(
  url: string,
  rootToken: string,
  layout: { mount: string; tenantPath: string },
): Promise<{ token: string; tenantRole: string }> {
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}/v1/${path}`, {
      method,
      headers: { 'x-vault-token': rootToken, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`OpenBao set-up: ${method} ${path} answered ${res.status}`);
    return text ? (JSON.parse(text) as Record<string, any>) : {};
  };
  const auths = await call('GET', 'sys/auth');
  const accessor = auths.data?.['token/']?.accessor;
  if (typeof accessor !== 'string') throw new Error('OpenBao set-up: no token auth method');
  // The alias name is the tenant id, as the gateway asked for it when minting (it only asks
  // with ids that are lowercase, since the identity store folds case).
  const tenantSegment = `{{identity.entity.aliases.${accessor}.name}}`;
  const prefix = `${layout.mount}/data/${layout.tenantPath.replace('{tenant_id}', tenantSegment)}`;
  await call('PUT', `sys/policies/acl/${TENANT_ROLE}`, {
    policy: `path "${prefix}/*" {\n  capabilities = ["read"]\n}\n`,
  });
  await call('PUT', 'sys/policies/acl/gateway', {
    policy: `path "auth/token/create/${TENANT_ROLE}" {\n  capabilities = ["update"]\n}\n`,
  });
  await call('POST', `auth/token/roles/${TENANT_ROLE}`, {
    allowed_policies: [TENANT_ROLE],
    allowed_entity_aliases: ['*'],
    token_no_default_policy: true,
    token_explicit_max_ttl: 900,
    renewable: false,
  });
  const created = await call('POST', 'auth/token/create', {
    policies: ['gateway'],
    no_default_policy: true,
    ttl: '768h',
    display_name: 'gateway',
  });
  const token = created.auth?.client_token;
  if (typeof token !== 'string') throw new Error('OpenBao set-up: no gateway token');
  return { token, tenantRole: TENANT_ROLE };
}
