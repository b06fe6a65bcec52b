// Turns an agent's credential_ref into the headers injected into its upstream call, at call
// time, so a rotated secret takes effect on the next call and nothing is cached in a history.
import type { MikroORM } from '@mikro-orm/postgresql';

export interface CredentialResolver {
  headersFor(tenantId: string, credentialRef: string | null | undefined): Promise<Record<string, string>>;
}

export function createCredentialResolver(_orm: MikroORM): CredentialResolver {
  return {
    async headersFor(_tenantId, credentialRef) {
      if (!credentialRef) return {};
      // Managed and vault-backed secrets are resolved by the vault module (credentials issue).
      throw new Error('credential resolution is not available yet');
    },
  };
}
