// Reads source=vault secrets from an OpenBao or HashiCorp Vault server's KV version 2 engine,
// at call time, never caching or storing the value. A reference names the KV v2 read path and
// the field: `<mount>/data/<path>#<field>`, e.g. `kv/data/agents/foo#token`.
import { request } from 'undici';

export type VaultRef = { path: string; field: string };

const REF = /^([A-Za-z0-9._-]+\/data\/[A-Za-z0-9._\-/]*[A-Za-z0-9._-])#([A-Za-z0-9._-]{1,128})$/;

export function parseVaultRef(ref: string): VaultRef | undefined {
  const m = REF.exec(ref);
  if (!m || m[1].split('/').some((segment) => segment === '' || segment === '.' || segment === '..')) return undefined;
  return { path: m[1], field: m[2] };
}

/** Why a vault read failed, coarse on purpose: the messages end up in errors and histories. */
export type VaultFailure = 'unconfigured' | 'unreachable' | 'denied' | 'not_found' | 'not_a_string';

export class VaultReadError extends Error {
  override name = 'VaultReadError';
  readonly reason: VaultFailure;
  constructor(reason: VaultFailure) {
    super(`vault secret could not be read (${reason})`);
    this.reason = reason;
  }
}

export async function readVaultSecret(server: { addr: string; token: string } | undefined, ref: string, timeoutMs = 5_000): Promise<string> {
  if (!server) throw new VaultReadError('unconfigured');
  const parsed = parseVaultRef(ref);
  if (!parsed) throw new VaultReadError('not_found');
  let status: number;
  let payload: unknown;
  try {
    const res = await request(`${server.addr}/v1/${parsed.path}`, {
      method: 'GET',
      headers: { 'x-vault-token': server.token },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    status = res.statusCode;
    payload = status === 200 ? await res.body.json() : await res.body.dump();
  } catch {
    throw new VaultReadError('unreachable');
  }
  if (status === 403 || status === 401) throw new VaultReadError('denied');
  if (status === 404) throw new VaultReadError('not_found');
  if (status !== 200) throw new VaultReadError('unreachable');
  // KV v2 answers {data: {data: {...fields}, metadata: {...}}}.
  const value = (payload as { data?: { data?: Record<string, unknown> | null } }).data?.data?.[parsed.field];
  if (value === undefined || value === null) throw new VaultReadError('not_found');
  if (typeof value !== 'string') throw new VaultReadError('not_a_string');
  return value;
}
