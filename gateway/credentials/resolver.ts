// Turns an agent's credential_ref into the headers injected into its upstream call, at call
// time, so a rotated secret takes effect on the next call and nothing is cached in a history:
//   bearer  → Authorization: Bearer <secret>
//   api_key → <header_name, default X-API-Key>: <secret>
//   none    → nothing
// Managed secrets are decrypted from their envelope; vault secrets are read from the KV v2
// server now, inside the tenant's own prefix. Failures are ApplicationFailures with a coarse
// message (they are recorded in the workflow history): never the secret, the key or the
// vault's answer, and one message for every unreadable reference (outside the tenant,
// missing, denied, not a string), so no history tells which it was.
import { ApplicationFailure } from '@temporalio/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { VaultConfig } from './config.ts';
import { createSecretStore } from './secrets.ts';
import { DEFAULT_API_KEY_HEADER, isHeaderSafe } from './header-rules.ts';
import { VaultReadError, type VaultClient } from './vault.ts';

export interface CredentialResolver {
  headersFor(tenantId: string, credentialRef: string | null | undefined): Promise<Record<string, string>>;
}

export const CREDENTIAL_UNAVAILABLE = 'CredentialUnavailable';

function unavailable(reason: string, retryable: boolean): ApplicationFailure {
  return ApplicationFailure.create({
    type: CREDENTIAL_UNAVAILABLE,
    message: `credential could not be resolved (${reason})`,
    nonRetryable: !retryable,
  });
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
      if (!credential) throw unavailable('not_found', false);
      if (credential.authType === 'none') return {};
      let secret: string | null;
      try {
        secret = await store.secretOf(credential);
      } catch (err) {
        // An unreachable vault may come back; an unreadable reference or an envelope that
        // does not open will not.
        if (err instanceof VaultReadError)
          throw err.reason === 'unreachable' ? unavailable('unreachable', true) : unavailable('unusable', false);
        throw unavailable('undecryptable', false);
      }
      if (!secret || !isHeaderSafe(secret)) throw unavailable('unusable', false);
      if (credential.authType === 'bearer') return { authorization: `Bearer ${secret}` };
      return { [(credential.headerName ?? DEFAULT_API_KEY_HEADER).toLowerCase()]: secret };
    },
  };
}
