// The vault's settings, read from the environment: the key-encryption keyring for managed
// secrets and the address of the Vault/OpenBao server for source=vault secrets.
//
//   VAULT_KEKS         comma-separated `id:base64key` pairs; every key is 32 bytes (AES-256).
//                      All keys a stored secret may still be wrapped under must be listed.
//   VAULT_KEK_CURRENT  the id new data keys are wrapped under (defaults to the only key).
//   VAULT_ADDR         e.g. http://127.0.0.1:8200 (OpenBao or HashiCorp Vault, KV v2)
//   VAULT_TOKEN        the gateway's token: with VAULT_TENANT_ROLE, one that may only mint
//                      child tokens through that role; without, one that reads the tenants' paths
//   VAULT_MOUNT        the KV v2 mount tenants' secrets live under (default `secret`)
//   VAULT_TENANT_PATH  each tenant's part of the mount, a template naming {tenant_id} as one
//                      whole segment (default `tenants/{tenant_id}`)
//   VAULT_TENANT_ROLE  token role whose child tokens are bound to one tenant (docs/CATALOG.md)
//
// Errors name the variable, never a key.
import { z } from 'zod';
import { ConfigError, gatherConfig, parseEnv } from '../../lib/config.ts';
import type { VaultLayout, VaultServer } from './vault.ts';

export type Keyring = {
  /** Id of the key new data keys are wrapped under; undefined when no keyring is configured. */
  current: string | undefined;
  keys: ReadonlyMap<string, Buffer>;
};

export type VaultConfig = {
  keyring: Keyring;
  /** Vault/OpenBao server for source=vault credentials; undefined when not configured. */
  server: VaultServer | undefined;
  layout: VaultLayout;
};

const SEGMENT = /^[A-Za-z0-9_-]+$/;
const VaultEnv = z.object({
  VAULT_MOUNT: z
    .string()
    .default('secret')
    .refine((m) => m.split('/').every((s) => SEGMENT.test(s)), 'a mount path: segments of letters, digits, - and _'),
  VAULT_TENANT_PATH: z
    .string()
    .default('tenants/{tenant_id}')
    .refine(
      (t) => t.split('/').every((s) => s === '{tenant_id}' || SEGMENT.test(s)),
      'segments of letters, digits, - and _, and {tenant_id}',
    )
    // A whole segment, exactly once: a tenant id is then never a prefix of another's path.
    .refine(
      (t) => t.split('/').filter((s) => s === '{tenant_id}').length === 1,
      'must name {tenant_id} once, as a whole segment',
    ),
  VAULT_TENANT_ROLE: z.string().regex(SEGMENT, 'a token role name').optional(),
});

const KEK_ID = /^[A-Za-z0-9._-]{1,64}$/;

function parseKeyring(keks: string | undefined, current: string | undefined): Keyring {
  const keys = new Map<string, Buffer>();
  for (const entry of (keks ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const colon = entry.indexOf(':');
    const id = colon > 0 ? entry.slice(0, colon) : '';
    if (!KEK_ID.test(id)) throw new Error('invalid configuration: VAULT_KEKS: each entry is id:base64key');
    const key = Buffer.from(entry.slice(colon + 1), 'base64');
    if (key.length !== 32) throw new Error(`invalid configuration: VAULT_KEKS: key ${id} is not 32 bytes of base64`);
    if (keys.has(id)) throw new Error(`invalid configuration: VAULT_KEKS: key ${id} is listed twice`);
    keys.set(id, key);
  }
  const chosen = current?.trim() || (keys.size === 1 ? [...keys.keys()][0] : undefined);
  if (chosen !== undefined && !keys.has(chosen))
    throw new Error('invalid configuration: VAULT_KEK_CURRENT names no key of VAULT_KEKS');
  if (chosen === undefined && keys.size > 1)
    throw new Error('invalid configuration: set VAULT_KEK_CURRENT when VAULT_KEKS has several keys');
  return { current: chosen, keys };
}

export function loadVaultConfig(env: NodeJS.ProcessEnv = process.env): VaultConfig {
  const addr = env.VAULT_ADDR?.trim();
  const { settings, keyring } = gatherConfig({
    addr: () => {
      if (addr && !/^https?:\/\/[^/]+/.test(addr)) throw new ConfigError('VAULT_ADDR must be an http(s) URL');
    },
    settings: () => parseEnv(VaultEnv, Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ''))),
    keyring: () => parseKeyring(env.VAULT_KEKS, env.VAULT_KEK_CURRENT),
  });
  const { VAULT_MOUNT: mount, VAULT_TENANT_PATH: tenantPath, VAULT_TENANT_ROLE: tenantRole } = settings;
  return {
    keyring,
    server: addr
      ? { addr: addr.replace(/\/+$/, ''), token: env.VAULT_TOKEN ?? '', ...(tenantRole ? { tenantRole } : {}) }
      : undefined,
    layout: { mount, tenantPath },
  };
}
