// What the x402 settlement client needs to call the tenant's facilitator over mutual TLS:
// the facilitator's URL and the client certificate and key from the tenant's facilitator
// credential, read at call time (a rotated credential takes effect on the next settle).
// The server's certificate is verified against the gateway's own trust configuration, not
// anything the tenant supplies.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { VaultConfig } from '../credentials/config.ts';
import { createSecretStore } from '../credentials/secrets.ts';
import type { VaultClient } from '../credentials/vault.ts';
import { SettlementConfigSchema } from './entity.ts';
import { parseClientTlsBundle } from './pem.ts';

export type SettlementClientTls = { facilitatorUrl: string; credentialId: string; certPem: string; keyPem: string };

/** Raised when the tenant has settlement configured but its credential cannot be used now. */
export class SettlementCredentialError extends Error {
  override name = 'SettlementCredentialError';
}

/**
 * The tenant's facilitator endpoint and client TLS material, or null when the tenant has no
 * settlement configuration. Throws SettlementCredentialError (coarse message, no secret) when
 * the referenced credential is gone, unreadable, or no longer holds a usable certificate/key.
 */
export async function loadSettlementClientTls(
  deps: { orm: MikroORM; config: { vault: VaultConfig }; vaultClient: VaultClient },
  tenantId: string,
): Promise<SettlementClientTls | null> {
  const row = await deps.orm.em.fork().findOne(SettlementConfigSchema, { tenantId });
  if (!row) return null;
  const store = createSecretStore(deps.orm, deps.config.vault, deps.vaultClient);
  const credential = await store.find(tenantId, row.facilitatorCredentialRef);
  if (!credential) throw new SettlementCredentialError('facilitator credential not found');
  let secret: string | null;
  try {
    secret = await store.secretOf(credential);
  } catch {
    throw new SettlementCredentialError('facilitator credential could not be read');
  }
  const bundle = secret ? parseClientTlsBundle(secret) : 'no_certificate';
  if (typeof bundle === 'string') throw new SettlementCredentialError(`facilitator credential unusable (${bundle})`);
  return { facilitatorUrl: row.facilitatorUrl, credentialId: credential.id, ...bundle };
}
