// Which vault references a tenant may name (gateway/credentials/vault.ts), decided on the text
// alone: a KV v2 read path strictly inside the tenant's own prefix, segment by segment, with
// nothing a server or a proxy in front of it could fold into another path (`..`, `.`, empty
// segments, escapes, separators), and a plain field.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { resolveTenantVaultRef, vaultRefRule, type VaultLayout } from '../../gateway/credentials/vault.ts';

const LAYOUT: VaultLayout = { mount: 'secret', tenantPath: 'tenants/{tenant_id}' };

describe('vault references', () => {
  it('resolves a reference inside the tenant prefix to its read path and field', () => {
    assert.deepEqual(resolveTenantVaultRef(LAYOUT, 'acme', 'secret/data/tenants/acme/openai#token'), {
      path: 'secret/data/tenants/acme/openai',
      field: 'token',
    });
    assert.deepEqual(resolveTenantVaultRef(LAYOUT, 'acme', 'secret/data/tenants/acme/a/b.c/d_e-f#x.y'), {
      path: 'secret/data/tenants/acme/a/b.c/d_e-f',
      field: 'x.y',
    });
    const nested = { mount: 'kv/prod', tenantPath: 'gw/{tenant_id}/keys' };
    assert.deepEqual(resolveTenantVaultRef(nested, 't-1', 'kv/prod/data/gw/t-1/keys/k#v'), {
      path: 'kv/prod/data/gw/t-1/keys/k',
      field: 'v',
    });
  });

  it('refuses another tenant’s path, the prefix itself, and a prefix that is only a string prefix', () => {
    for (const ref of [
      'secret/data/tenants/other/openai#token',
      'secret/data/tenants/acme2/openai#token',
      'secret/data/tenants/acm/e/openai#token',
      'secret/data/tenants/acme#token',
      'secret/data/tenants/ACME/openai#token',
      'secret/metadata/tenants/acme/openai#token',
      'other/data/tenants/acme/openai#token',
      'secret/tenants/acme/openai#token',
    ])
      assert.equal(resolveTenantVaultRef(LAYOUT, 'acme', ref), undefined, ref);
  });

  it('refuses segments a server or proxy could fold, and a missing or odd field', () => {
    for (const ref of [
      'secret/data/tenants/acme/../other/openai#token',
      'secret/data/tenants/acme/..#token',
      'secret/data/tenants/acme/./openai#token',
      'secret/data/tenants/acme/...#token',
      'secret/data/tenants/acme//openai#token',
      'secret/data/tenants/acme/openai/#token',
      '/secret/data/tenants/acme/openai#token',
      'secret/data/tenants/acme/%2e%2e/openai#token',
      'secret/data/tenants/acme/open%2Fai#token',
      'secret/data/tenants/acme/open\\ai#token',
      'secret/data/tenants/acme/open ai#token',
      'secret/data/tenants/acme/openai?x=1#token',
      'secret/data/tenants/acme/openai',
      'secret/data/tenants/acme/openai#',
      'secret/data/tenants/acme/openai#a#b',
      'secret/data/tenants/acme/openai#to/ken',
      `secret/data/tenants/acme/openai#${'f'.repeat(129)}`,
    ])
      assert.equal(resolveTenantVaultRef(LAYOUT, 'acme', ref), undefined, ref);
  });

  it('gives no prefix to a tenant id that cannot be a path segment and identity alias as it is', () => {
    for (const tenant of ['Acme', '', '-acme', 'ac/me', 'ac..me/..', '..', 'a'.repeat(129), 'acme ', 'acmé'])
      assert.equal(
        resolveTenantVaultRef(LAYOUT, tenant, `secret/data/tenants/${tenant}/openai#token`),
        undefined,
        tenant,
      );
    assert.match(vaultRefRule(LAYOUT, 'Acme'), /cannot own vault secrets/);
    assert.equal(vaultRefRule(LAYOUT, 'acme'), 'vault_ref must look like secret/data/tenants/acme/<path>#<field>');
  });

  it('never resolves outside the tenant prefix, whatever the reference (property)', () => {
    const segment = fc.oneof(
      fc.constantFrom('..', '.', '', 'acme', 'other', 'data', 'secret', 'tenants', '%2e%2e', 'a b', 'k'),
      fc.string({ maxLength: 6 }),
    );
    const ref = fc
      .tuple(fc.array(segment, { minLength: 1, maxLength: 8 }), fc.string({ maxLength: 10 }))
      .map(([segments, field]) => `${segments.join('/')}#${field}`);
    const anchored = fc
      .tuple(fc.array(segment, { minLength: 0, maxLength: 4 }), fc.string({ maxLength: 10 }))
      .map(([segments, field]) => `secret/data/tenants/acme/${segments.join('/')}#${field}`);
    fc.assert(
      fc.property(fc.oneof(ref, anchored), (text) => {
        const resolved = resolveTenantVaultRef(LAYOUT, 'acme', text);
        if (!resolved) return;
        const segments = resolved.path.split('/');
        assert.deepEqual(segments.slice(0, 4), ['secret', 'data', 'tenants', 'acme']);
        assert.ok(segments.length > 4);
        for (const s of segments) assert.match(s, /^[A-Za-z0-9._-]+$/);
        for (const s of segments) assert.ok(s !== '.' && s !== '..', text);
        assert.match(resolved.field, /^[A-Za-z0-9._-]{1,128}$/);
        assert.equal(`${resolved.path}#${resolved.field}`, text);
      }),
      { numRuns: 2000 },
    );
  });
});
