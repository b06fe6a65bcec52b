// The vault's settings, read from the environment: the key-encryption keyring for managed
// secrets and the address of the Vault/OpenBao server for source=vault secrets.
//
//   VAULT_KEKS         comma-separated `id:base64key` pairs; every key is 32 bytes (AES-256).
//                      All keys a stored secret may still be wrapped under must be listed.
//   VAULT_KEK_CURRENT  the id new data keys are wrapped under (defaults to the only key).
//   VAULT_ADDR         e.g. http://127.0.0.1:8200 (OpenBao or HashiCorp Vault, KV v2)
//   VAULT_TOKEN        token with read access to the referenced KV v2 paths
//
// Errors name the variable, never a key.

export type Keyring = {
  /** Id of the key new data keys are wrapped under; undefined when no keyring is configured. */
  current: string | undefined;
  keys: ReadonlyMap<string, Buffer>;
};

export type VaultConfig = {
  keyring: Keyring;
  /** Vault/OpenBao server for source=vault credentials; undefined when not configured. */
  server: { addr: string; token: string } | undefined;
};

const KEK_ID = /^[A-Za-z0-9._-]{1,64}$/;

export function parseKeyring(keks: string | undefined, current: string | undefined): Keyring {
  const keys = new Map<string, Buffer>();
  for (const entry of (keks ?? '').split(',').map((e) => e.trim()).filter(Boolean)) {
    const colon = entry.indexOf(':');
    const id = colon > 0 ? entry.slice(0, colon) : '';
    if (!KEK_ID.test(id)) throw new Error('invalid configuration: VAULT_KEKS: each entry is id:base64key');
    const key = Buffer.from(entry.slice(colon + 1), 'base64');
    if (key.length !== 32) throw new Error(`invalid configuration: VAULT_KEKS: key ${id} is not 32 bytes of base64`);
    if (keys.has(id)) throw new Error(`invalid configuration: VAULT_KEKS: key ${id} is listed twice`);
    keys.set(id, key);
  }
  const chosen = current?.trim() || (keys.size === 1 ? [...keys.keys()][0] : undefined);
  if (chosen !== undefined && !keys.has(chosen)) throw new Error('invalid configuration: VAULT_KEK_CURRENT names no key of VAULT_KEKS');
  if (chosen === undefined && keys.size > 1) throw new Error('invalid configuration: set VAULT_KEK_CURRENT when VAULT_KEKS has several keys');
  return { current: chosen, keys };
}

export function loadVaultConfig(env: NodeJS.ProcessEnv = process.env): VaultConfig {
  const addr = env.VAULT_ADDR?.trim();
  if (addr && !/^https?:\/\/[^/]+/.test(addr)) throw new Error('invalid configuration: VAULT_ADDR must be an http(s) URL');
  return {
    keyring: parseKeyring(env.VAULT_KEKS, env.VAULT_KEK_CURRENT),
    server: addr ? { addr: addr.replace(/\/+$/, ''), token: env.VAULT_TOKEN ?? '' } : undefined,
  };
}
