// The `credentials` table (created by the init migration). A managed secret is stored as an
// envelope (kek_id, wrapped_key, secret_ciphertext: see envelope.ts); a vault secret only as
// its reference (vault_ref), read from the vault server at call time.
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

export type AuthType = 'bearer' | 'api_key' | 'none';
export type CredentialSource = 'managed' | 'vault';

export const CredentialSchema = defineEntity({
  name: 'Credential',
  tableName: 'credentials',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    name: p.string(),
    authType: p.string().$type<AuthType>(),
    source: p.string().$type<CredentialSource>(),
    headerName: p.string().nullable(),
    maskedHint: p.string().nullable(),
    vaultRef: p.string().nullable(),
    version: p.integer(),
    kekId: p.string().nullable(),
    wrappedKey: p.blob().nullable(),
    secretCiphertext: p.blob().nullable(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
export type Credential = InferEntity<typeof CredentialSchema>;
