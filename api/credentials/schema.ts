// Credential request and response bodies (zod). The OpenAPI document is generated from these;
// validation messages name the field, never internal state.
import { HEADER_SAFE } from '../../gateway/credentials/header-rules.ts';
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';
import { idParam, maxChars, nameField } from '../validation.ts';
import type { CredentialState } from '../../gateway/credentials/management.ts';

const MAX_SECRET_CHARS = 65_536;

const AuthTypeField = z.enum(['bearer', 'api_key', 'none'], {
  error: 'auth_type must be one of bearer, api_key, none',
});
const SourceField = z.enum(['managed', 'vault'], { error: 'source must be one of managed, vault' });
const NameField = nameField('name must not be empty');
const PlaintextField = maxChars(
  z.string({ error: 'plaintext must be a string' }).min(1, 'plaintext must not be empty'),
  MAX_SECRET_CHARS,
  'plaintext is too long',
).meta({ description: 'The secret. Write-only: never returned, logged or stored unencrypted.', writeOnly: true });
const VaultRefField = maxChars(
  z
    .string({
      error: (i) => (i.input === undefined ? 'vault_ref is required for source vault' : 'vault_ref must be a string'),
    })
    .min(1, 'vault_ref is required for source vault'),
  512,
  'vault_ref is too long',
)
  // Its place (inside the caller's own tenant prefix) is checked by the route, which knows the tenant.
  .meta({
    description:
      "KV v2 secret and field in the Vault/OpenBao server, inside the tenant's own prefix: `<mount>/data/tenants/<tenant id>/<path>#<field>` by default.",
    example: 'secret/data/tenants/acme/openai#token',
  });
const HeaderNameField = z
  .string({ error: 'header_name must be a string' })
  .max(128, 'header_name is too long')
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'header_name must be an HTTP header name')
  .refine((name) => !isReservedHeader(name), 'header_name names a header the gateway controls')
  .meta({ description: 'Header the api_key secret is sent in (default X-API-Key).' });

/** A field one kind of credential does not take: present, it is a 400 naming the rule. */
const notFor = (message: string) => z.never({ error: message }).optional();
/** A secret sent as a header (bearer, api_key) must be able to be one: visible ASCII, no edge spaces. */
const headerSecret = (authType: string) =>
  z
    .string({
      error: (i) =>
        i.input === undefined ? `plaintext is required for auth_type ${authType}` : 'plaintext must be a string',
    })
    .min(1, 'plaintext must not be empty')
    .max(MAX_SECRET_CHARS, 'plaintext is too long')
    .regex(
      HEADER_SAFE,
      `plaintext must be printable ASCII without line breaks or edge spaces for auth_type ${authType}`,
    )
    .meta({ description: `The secret, sent as the ${authType} header. Write-only.`, writeOnly: true });

const authError = (i: { input?: unknown }) =>
  (i.input as { auth_type?: unknown } | undefined)?.auth_type === undefined
    ? 'auth_type is required'
    : 'auth_type must be one of bearer, api_key, none';

/**
 * One variant per (source, auth_type): zod checks the source, then the auth type, then that
 * variant's fields, and the document lists the same variants (oneOf), so "plaintext is
 * required for bearer" or "no header_name without api_key" is in both.
 */
const managed = z.discriminatedUnion(
  'auth_type',
  [
    z.strictObject({
      name: NameField,
      auth_type: z.literal('none'),
      source: z.literal('managed'),
      plaintext: PlaintextField.optional(),
      vault_ref: notFor('vault_ref is only valid for source vault'),
      header_name: notFor('header_name is only valid for auth_type api_key'),
    }),
    z.strictObject({
      name: NameField,
      auth_type: z.literal('bearer'),
      source: z.literal('managed'),
      plaintext: headerSecret('bearer'),
      vault_ref: notFor('vault_ref is only valid for source vault'),
      header_name: notFor('header_name is only valid for auth_type api_key'),
    }),
    z.strictObject({
      name: NameField,
      auth_type: z.literal('api_key'),
      source: z.literal('managed'),
      plaintext: headerSecret('api_key'),
      vault_ref: notFor('vault_ref is only valid for source vault'),
      header_name: HeaderNameField.optional(),
    }),
  ],
  { error: authError },
);
const vault = z.discriminatedUnion(
  'auth_type',
  [
    z.strictObject({
      name: NameField,
      auth_type: z.enum(['none', 'bearer']),
      source: z.literal('vault'),
      vault_ref: VaultRefField,
      plaintext: notFor('plaintext is only valid for source managed'),
      header_name: notFor('header_name is only valid for auth_type api_key'),
    }),
    z.strictObject({
      name: NameField,
      auth_type: z.literal('api_key'),
      source: z.literal('vault'),
      vault_ref: VaultRefField,
      plaintext: notFor('plaintext is only valid for source managed'),
      header_name: HeaderNameField.optional(),
    }),
  ],
  { error: authError },
);

export const CredentialCreateInput = z
  .discriminatedUnion('source', [managed, vault], {
    // No source: the message names the first missing field in field order, as for one object.
    error: (i) => {
      const body = (i.input ?? {}) as { name?: unknown; auth_type?: unknown; source?: unknown };
      if (body.name === undefined) return 'name is required';
      if (body.auth_type === undefined) return 'auth_type is required';
      return body.source === undefined ? 'source is required' : 'source must be one of managed, vault';
    },
  })
  .meta({
    id: 'CredentialCreate',
    description:
      "A new upstream credential: `plaintext` for source=managed (required unless auth_type=none), `vault_ref` for source=vault; `header_name` for auth_type=api_key only. A vault_ref outside the tenant's own prefix is a 400.",
  });
export type CredentialCreateInput = z.infer<typeof CredentialCreateInput>;

/**
 * What a PUT says of itself, stated in the document too (if/then; the route checks the same on
 * the credential it would leave): an auth_type it sets other than api_key takes no header_name,
 * and one sent as a header takes a plaintext that can be one.
 */
const UPDATE_RULES = {
  allOf: [
    {
      if: { required: ['auth_type'], properties: { auth_type: { enum: ['none', 'bearer'] } } },
      then: { properties: { header_name: { type: 'null' } } },
    },
    {
      if: { required: ['auth_type'], properties: { auth_type: { enum: ['bearer', 'api_key'] } } },
      then: { properties: { plaintext: { type: 'string', pattern: HEADER_SAFE.source } } },
    },
  ],
};

export const CredentialUpdateInput = z
  .strictObject({
    name: NameField.optional(),
    auth_type: AuthTypeField.optional(),
    plaintext: PlaintextField.optional(),
    vault_ref: VaultRefField.optional(),
    header_name: HeaderNameField.nullable().optional(),
  })
  .meta({
    ...UPDATE_RULES,
    id: 'CredentialUpdate',
    description:
      "Every key is optional; an absent key leaves its value unchanged. A new plaintext or vault_ref is a rotation: version increments. Checked on the credential it would leave (else 400): plaintext only for a managed credential, vault_ref only for a vault one (inside the tenant's own prefix), header_name only with auth_type api_key; a bearer or api_key secret must be printable ASCII without line breaks or edge spaces; the tenant's facilitator credential must keep holding a PEM client certificate and key.",
  });
export type CredentialUpdateInput = z.infer<typeof CredentialUpdateInput>;

export const CredentialView = z
  .strictObject({
    id: z.string().regex(/^cred_/),
    tenant_id: z.string(),
    name: z.string(),
    auth_type: AuthTypeField,
    source: SourceField,
    masked_hint: z.string().nullable().optional().meta({
      description:
        "source=managed only: the last characters of the secret at most, never the secret; for a PEM bundle with a certificate, the certificate's subject and the tail of its SHA-256 fingerprint; null when no secret is stored.",
    }),
    vault_ref: z.string().optional().meta({ description: 'source=vault only.' }),
    header_name: z.string().optional().meta({ description: 'auth_type=api_key only.' }),
    version: z.int().min(1),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Credential' });

export const CredentialList = z
  .strictObject({ data: z.array(CredentialView), next_cursor: z.string().nullable() })
  .meta({ id: 'CredentialList' });

/** GET /v1/credentials: the page. */
export const CredentialListQuery = z.object(PageQuery);

/** Path of every /v1/credentials/{id} operation. */
export const CredentialPath = z.object({ id: idParam('cred', 'Credential') });

/** Headers an api_key credential may not be injected as: framing, hop-by-hop and the gateway's own. */
const RESERVED = new Set([
  'host',
  'content-length',
  'content-type',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'upgrade',
  'x-request-id',
  'x-payment',
  'payment-signature',
  'cookie',
]);
function isReservedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return RESERVED.has(lower) || lower.startsWith('proxy-') || lower.startsWith('x-gateway-');
}

/** Rules across fields, checked on the state a create or update would leave. */
export function credentialRuleError(state: CredentialState): string | undefined {
  if (state.source === 'managed' && state.authType !== 'none' && !state.hasSecret)
    return `plaintext is required for auth_type ${state.authType}`;
  if (state.source === 'vault' && !state.vaultRef) return 'vault_ref is required for source vault';
  if (state.headerName !== null && state.authType !== 'api_key')
    return 'header_name is only valid for auth_type api_key';
  return undefined;
}
