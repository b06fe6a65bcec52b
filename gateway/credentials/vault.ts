// Reads source=vault secrets from an OpenBao or HashiCorp Vault server's KV version 2 engine,
// at call time, never storing the value. A reference names the KV v2 read path and the field,
// inside the calling tenant's own part of the vault:
//   <mount>/data/<tenant path>/<path>#<field>   e.g. secret/data/tenants/acme/openai#token
// (mount VAULT_MOUNT, tenant path VAULT_TENANT_PATH with {tenant_id}; docs/CATALOG.md).
//
// Every read checks the reference against its tenant first (a row written before the rule,
// or by SQL, resolves nowhere else) and, when a token role is configured, reads with a child
// token bound to that tenant, so the vault itself refuses another tenant's path too.
import { request } from 'undici';

export type VaultRef = { path: string; field: string };

/** Where tenants' secrets live: the KV v2 mount and the per-tenant path template. */
export type VaultLayout = { mount: string; tenantPath: string };

export type VaultServer = {
  addr: string;
  /** The gateway's own token; with `tenantRole` it may only mint per-tenant child tokens. */
  token: string;
  /** Token role (auth/token/create/<role>) whose child tokens are bound to one tenant. */
  tenantRole?: string;
};

/**
 * A tenant owns a vault prefix only when its id can be a path segment and an identity alias
 * as it is: lowercase (the vault's identity store folds case, so `Acme` would share `acme`'s
 * alias), digits, `-` and `_`, at most 128 characters.
 */
const VAULT_TENANT_ID = /^[a-z0-9][a-z0-9_-]{0,127}$/;

const SEGMENT = /^[A-Za-z0-9._-]+$/;
const FIELD = /^[A-Za-z0-9._-]{1,128}$/;

/** A path segment as the vault takes it: no separators, escapes or `.`/`..` that a server or proxy could fold. */
const isPlainSegment = (s: string) => SEGMENT.test(s) && !/^\.+$/.test(s);

/** The tenant's prefix as path segments (`secret`, `data`, `tenants`, `<id>`); undefined when the id cannot own one. */
function tenantVaultPrefix(layout: VaultLayout, tenantId: string): string[] | undefined {
  if (!VAULT_TENANT_ID.test(tenantId)) return undefined;
  return [
    ...layout.mount.split('/'),
    'data',
    ...layout.tenantPath.split('/').map((s) => (s === '{tenant_id}' ? tenantId : s)),
  ];
}

/**
 * The reference's read path and field when it names a secret strictly inside the tenant's
 * prefix; undefined otherwise. Decided on the text alone (segment by segment, so `acme` is
 * not a prefix of `acme2`), never by asking the vault, so a refusal says nothing about
 * whether the path exists.
 */
export function resolveTenantVaultRef(layout: VaultLayout, tenantId: string, ref: string): VaultRef | undefined {
  const prefix = tenantVaultPrefix(layout, tenantId);
  const parts = ref.split('#');
  if (!prefix || parts.length !== 2 || !FIELD.test(parts[1])) return undefined;
  const segments = parts[0].split('/');
  if (!segments.every(isPlainSegment) || segments.length <= prefix.length) return undefined;
  if (prefix.some((segment, i) => segments[i] !== segment)) return undefined;
  return { path: parts[0], field: parts[1] };
}

/** The one message every refused reference gets, naming only the caller's own prefix. */
export function vaultRefRule(layout: VaultLayout, tenantId: string): string {
  const prefix = tenantVaultPrefix(layout, tenantId);
  if (!prefix) return 'this tenant id cannot own vault secrets (lowercase letters, digits, - and _ only)';
  return `vault_ref must look like ${prefix.join('/')}/<path>#<field>`;
}

/**
 * Why a vault read failed. Coarse on purpose: `unreadable` covers a reference outside the
 * tenant, a missing path or field, a denied read and a value that is not a string alike,
 * so nothing downstream (errors, histories, metrics) can tell them apart; `unreachable` is
 * the vault (or its token) being unavailable, which may pass.
 */
export type VaultFailure = 'unreachable' | 'unreadable';

export class VaultReadError extends Error {
  override name = 'VaultReadError';
  readonly reason: VaultFailure;
  constructor(reason: VaultFailure) {
    super(`vault secret could not be read (${reason})`);
    this.reason = reason;
  }
}

/** Child tokens asked for; the role's own maximum may shorten them. */
const CHILD_TOKEN_TTL_S = 300;
type ChildToken = { token: string; renewAt: number };
type TokenCache = { tokens: Map<string, ChildToken>; minting: Map<string, Promise<ChildToken>> };

async function mintChildToken(
  server: VaultServer & { tenantRole: string },
  tenantId: string,
  timeoutMs: number,
): Promise<ChildToken> {
  let status: number;
  let payload: unknown;
  try {
    const res = await request(`${server.addr}/v1/auth/token/create/${encodeURIComponent(server.tenantRole)}`, {
      method: 'POST',
      headers: { 'x-vault-token': server.token, 'content-type': 'application/json' },
      body: JSON.stringify({ entity_alias: tenantId, ttl: `${CHILD_TOKEN_TTL_S}s` }),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    status = res.statusCode;
    payload = status === 200 ? await res.body.json() : await res.body.dump();
  } catch {
    throw new VaultReadError('unreachable');
  }
  const auth = (payload as { auth?: { client_token?: unknown; lease_duration?: unknown } } | undefined)?.auth;
  // The gateway's own token failing to mint is an operator's problem, not the reference's.
  if (status !== 200 || typeof auth?.client_token !== 'string') throw new VaultReadError('unreachable');
  const ttlS =
    typeof auth.lease_duration === 'number' && auth.lease_duration > 0 ? auth.lease_duration : CHILD_TOKEN_TTL_S;
  // Renewed once four fifths of its life have passed, so a read never carries an expiring token.
  return { token: auth.client_token, renewAt: Date.now() + ttlS * 800 };
}

/** The tenant's child token, cached (one mint in flight per tenant) until shortly before it expires. */
async function tenantToken(
  server: VaultServer & { tenantRole: string },
  cache: TokenCache,
  tenantId: string,
  timeoutMs: number,
  fresh: boolean,
): Promise<string> {
  const now = Date.now();
  const held = cache.tokens.get(tenantId);
  if (held && !fresh && held.renewAt > now) return held.token;
  let minting = cache.minting.get(tenantId);
  if (!minting) {
    for (const [id, token] of cache.tokens) if (token.renewAt <= now) cache.tokens.delete(id);
    minting = mintChildToken(server, tenantId, timeoutMs).finally(() => cache.minting.delete(tenantId));
    cache.minting.set(tenantId, minting);
  }
  const token = await minting;
  cache.tokens.set(tenantId, token);
  return token.token;
}

async function readKv(
  addr: string,
  token: string,
  path: string,
  timeoutMs: number,
): Promise<{ status: number; payload: unknown }> {
  try {
    const res = await request(`${addr}/v1/${path}`, {
      method: 'GET',
      headers: { 'x-vault-token': token },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    return { status: res.statusCode, payload: res.statusCode === 200 ? await res.body.json() : await res.body.dump() };
  } catch {
    throw new VaultReadError('unreachable');
  }
}

/** Reads tenants' secrets from one vault configuration; holds that configuration's child tokens. */
export type VaultClient = {
  /** The field's value, read now as the tenant; VaultReadError (coarse) otherwise. */
  read(tenantId: string, ref: string, timeoutMs?: number): Promise<string>;
};

/** One per process, built where it is wired (api/main.ts, the worker), so every reader shares its child tokens. */
export function createVaultClient(vault: { server: VaultServer | undefined; layout: VaultLayout }): VaultClient {
  const cache: TokenCache = { tokens: new Map(), minting: new Map() };
  return {
    read: (tenantId, ref, timeoutMs = 5_000) =>
      readVaultSecret(vault.server, vault.layout, cache, tenantId, ref, timeoutMs),
  };
}

async function readVaultSecret(
  server: VaultServer | undefined,
  layout: VaultLayout,
  cache: TokenCache,
  tenantId: string,
  ref: string,
  timeoutMs: number,
): Promise<string> {
  const parsed = resolveTenantVaultRef(layout, tenantId, ref);
  if (!server || !parsed) throw new VaultReadError('unreadable');
  const asTenant = server.tenantRole
    ? (fresh: boolean) => tenantToken(server as VaultServer & { tenantRole: string }, cache, tenantId, timeoutMs, fresh)
    : undefined;
  let { status, payload } = await readKv(
    server.addr,
    asTenant ? await asTenant(false) : server.token,
    parsed.path,
    timeoutMs,
  );
  // A cached child token may have been revoked behind our back: one more try with a new one.
  if (asTenant && status === 403)
    ({ status, payload } = await readKv(server.addr, await asTenant(true), parsed.path, timeoutMs));
  // Only the vault's own trouble may pass; every refusal of this reference is one answer.
  if (status >= 500 || status === 429) throw new VaultReadError('unreachable');
  if (status !== 200) throw new VaultReadError('unreadable');
  // KV v2 answers {data: {data: {...fields}, metadata: {...}}}.
  const value = (payload as { data?: { data?: Record<string, unknown> | null } }).data?.data?.[parsed.field];
  if (typeof value !== 'string') throw new VaultReadError('unreadable');
  return value;
}
