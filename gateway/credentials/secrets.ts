// The one place a credential's secret is turned into plaintext, for the two readers that need
// it: the resolver (headers for an upstream call) and the settlement TLS loader. Never log,
// return or put into a workflow what this yields.
import type { MikroORM } from '@mikro-orm/postgresql';
import { CredentialSchema, type Credential } from './entity.ts';
import { seal, unseal, type Sealed } from './envelope.ts';
import type { VaultClient } from './vault.ts';
import type { VaultConfig } from './config.ts';

export type SecretStore = {
  /** The credential's current secret: decrypted (managed) or read from the vault now (vault); null when none is stored. */
  secretOf(credential: Credential): Promise<string | null>;
  /** Loads a credential of the tenant; undefined when absent (another tenant's id included). */
  find(tenantId: string, credentialId: string): Promise<Credential | undefined>;
  /** Encrypts a new secret version for this row. */
  seal(credential: Pick<Credential, 'id' | 'tenantId' | 'version'>, plaintext: string): Sealed;
  vault: VaultConfig;
};

export function sealedOf(c: Credential): Sealed | undefined {
  if (!c.kekId || !c.wrappedKey || !c.secretCiphertext) return undefined;
  return { kekId: c.kekId, wrappedKey: Buffer.from(c.wrappedKey), ciphertext: Buffer.from(c.secretCiphertext) };
}

export function createSecretStore(orm: MikroORM, vault: VaultConfig, vaultClient: VaultClient): SecretStore {
  return {
    vault,
    async secretOf(c) {
      // Re-checked against the row's own tenant on every read (VaultClient.read), whoever wrote the row.
      if (c.source === 'vault') return c.vaultRef ? vaultClient.read(c.tenantId, c.vaultRef) : null;
      const sealed = sealedOf(c);
      return sealed
        ? unseal(vault.keyring, { tenantId: c.tenantId, credentialId: c.id, version: c.version }, sealed)
        : null;
    },
    async find(tenantId, credentialId) {
      return (await orm.em.fork().findOne(CredentialSchema, { id: credentialId, tenantId })) ?? undefined;
    },
    seal(c, plaintext) {
      return seal(vault.keyring, { tenantId: c.tenantId, credentialId: c.id, version: c.version }, plaintext);
    },
  };
}
