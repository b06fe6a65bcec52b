// /v1/credentials: the tenant's credential vault. Responses carry metadata only (a masked
// hint or the vault reference); the secret is write-only (gateway/credentials/management.ts
// holds the writes and their locks; this maps the bodies to them).
import Router from '@koa/router';
import { parseOr400, parseQuery } from '../validation.ts';
import { pageOf } from '../pagination.ts';
import {
  CredentialCreateInput,
  CredentialListQuery,
  CredentialUpdateInput,
  credentialRuleError,
} from '../credentials/schema.ts';
import { serializeCredential } from '../credentials/serialize.ts';
import { createCredentialManagement } from '../../gateway/credentials/management.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

export function credentialRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();
  const credentials = createCredentialManagement({
    db: deps.orm,
    vault: deps.config.vault,
    vaultClient: deps.vaultClient,
    ruleError: credentialRuleError,
  });

  router.post('/credentials', async (ctx) => {
    // Every rule across fields (source, auth_type, plaintext, header_name) is the schema's.
    const input = parseOr400(CredentialCreateInput, ctx.request.body);
    const row = await credentials.create(ctx.state.caller.tenantId, {
      name: input.name,
      authType: input.auth_type,
      source: input.source,
      headerName: input.auth_type === 'api_key' ? (input.header_name ?? null) : null,
      vaultRef: input.source === 'vault' ? input.vault_ref : undefined,
      plaintext: input.source === 'managed' ? input.plaintext : undefined,
    });
    ctx.status = 201;
    ctx.body = serializeCredential(row);
  });

  router.get('/credentials', async (ctx) => {
    const page = pageOf(parseQuery(CredentialListQuery, ctx.query), 'cred');
    ctx.body = await credentials.list(ctx.state.caller.tenantId, page, serializeCredential);
  });

  router.get('/credentials/:id', async (ctx) => {
    ctx.body = serializeCredential(await credentials.get(ctx.state.caller.tenantId, ctx.params.id));
  });

  router.put('/credentials/:id', async (ctx) => {
    // The body is read once the credential is found and locked: a missing one is a 404 whatever it sent.
    const row = await credentials.update(ctx.state.caller.tenantId, ctx.params.id, () => {
      const patch = parseOr400(CredentialUpdateInput, ctx.request.body);
      return {
        name: patch.name,
        authType: patch.auth_type,
        headerName: patch.header_name,
        plaintext: patch.plaintext,
        vaultRef: patch.vault_ref,
        touched: Object.keys(patch).length > 0,
      };
    });
    ctx.body = serializeCredential(row);
  });

  router.delete('/credentials/:id', async (ctx) => {
    await credentials.remove(ctx.state.caller.tenantId, ctx.params.id);
    ctx.status = 204;
  });

  return router;
}
