// Turns an agent's credential_ref into the headers injected into its upstream call, at call
// time, so a rotated secret takes effect on the next call and nothing is cached in a history:
//   bearer  → Authorization: Bearer <secret>
//   api_key → <header_name, default X-API-Key>: <secret>
//   none    → nothing
// Managed secrets are decrypted from their envelope; vault secrets are read from the KV v2
// server now, inside the tenant's own prefix. A failure is a CredentialUnavailable with a
// coarse reason (its callers record it: the activity in a workflow history, the proxy in a
// response): never the secret, the key or the vault's answer, and one reason for every
// unreadable reference (outside the tenant, missing, denied, not a string), so nothing
// recorded tells which it was.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { VaultConfig } from './config.ts';
import { createSecretStore } from './secrets.ts';
import { DEFAULT_API_KEY_HEADER, isHeaderSafe } from './header-rules.ts';
import { VaultReadError, type VaultClient } from './vault.ts';

export interface CredentialResolver {
  headersFor(tenantId: string, credentialRef: string | null | undefined): Promise<Record<string, string>>;
}

/** Why a credential could not be resolved: only an unreachable vault may come back. */
export type CredentialUnavailableReason = 'not_found' | 'unreachable' | 'unusable' | 'undecryptable';

export class CredentialUnavailable extends Error {
  override name = 'CredentialUnavailable';
  readonly reason: CredentialUnavailableReason;
  constructor(reason: CredentialUnavailableReason) {
    super(`credential could not be resolved (${reason})`);
    this.reason = reason;
  }
  /** Whether trying again later may succeed (the vault was unreachable). */
  get retryable(): boolean {
    return this.reason === 'unreachable';
  }
}

export function createCredentialResolver(
  orm: MikroORM,
  vault: VaultConfig,
  vaultClient: VaultClient,
): CredentialResolver {
  const store = createSecretStore(orm, vault, vaultClient);
  return {
    async headersFor(tenantId, credentialRef) {
      if (!credentialRef) return {};
      const credential = await store.find(tenantId, credentialRef);
      if (!credential) throw new CredentialUnavailable('not_found');
      if (credential.authType === 'none') return {};
      let secret: string | null;
      try {
        secret = await store.secretOf(credential);
      } catch (err) {
        // An unreachable vault may come back; an unreadable reference or an envelope that
        // does not open will not.
        if (err instanceof VaultReadError)
          throw new CredentialUnavailable(err.reason === 'unreachable' ? 'unreachable' : 'unusable');
        throw new CredentialUnavailable('undecryptable');
      }
      if (!secret || !isHeaderSafe(secret)) throw new CredentialUnavailable('unusable');
      if (credential.authType === 'bearer') return { authorization: `Bearer ${secret}` };
      return { [(credential.headerName ?? DEFAULT_API_KEY_HEADER).toLowerCase()]: secret };
    },
  };
}
