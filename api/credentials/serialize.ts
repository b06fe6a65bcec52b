// The Credential as the API shows it: metadata only. The envelope columns never leave here.
import type { Credential } from '../../gateway/credentials/entity.ts';
import type { z } from 'zod';
import type { CredentialView } from './schema.ts';

export function serializeCredential(c: Credential): z.infer<typeof CredentialView> {
  return {
    id: c.id,
    tenant_id: c.tenantId,
    name: c.name,
    auth_type: c.authType,
    source: c.source,
    ...(c.source === 'managed' ? { masked_hint: c.maskedHint ?? null } : {}),
    ...(c.source === 'vault' && c.vaultRef ? { vault_ref: c.vaultRef } : {}),
    ...(c.authType === 'api_key' ? { header_name: c.headerName ?? 'X-API-Key' } : {}),
    version: c.version,
    created_at: c.createdAt.toISOString(),
    updated_at: c.updatedAt.toISOString(),
  };
}
