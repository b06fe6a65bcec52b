// /v1/credentials: the tenant's credential vault. Responses carry metadata only (a masked
// hint or the vault reference); the secret is write-only and leaves this module only as an
// envelope (managed) or not at all (vault: only its reference is stored).
import Router from '@koa/router';
import { LockMode } from '@mikro-orm/core';
import { newId, isId } from '../../lib/ids.ts';
import { badRequest, conflict, flushOr409, notFound } from '../errors.ts';
import { parseOr400, parseQuery } from '../validation.ts';
import { listPage, ownedRow, pageOf } from '../pagination.ts';
import { CredentialSchema, type AuthType, type Credential } from '../../gateway/credentials/entity.ts';
import {
  CredentialCreateInput,
  CredentialListQuery,
  CredentialUpdateInput,
  credentialRuleError,
  isHeaderSafe,
} from '../credentials/schema.ts';
import { serializeCredential } from '../credentials/serialize.ts';
import { maskedHint } from '../../gateway/credentials/hint.ts';
import { createSecretStore, type SecretStore } from '../../gateway/credentials/secrets.ts';
import { isCredentialReferenced, isFacilitatorCredential } from '../../gateway/credentials/references.ts';
import { resolveTenantVaultRef, vaultRefRule } from '../../gateway/credentials/vault.ts';
import { facilitatorSecretProblem } from '../../gateway/settlement/validate.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const NAME_TAKEN = 'a credential with this name already exists';

function headerSafetyError(authType: AuthType, secret: string): string | undefined {
  if (authType === 'none' || isHeaderSafe(secret)) return undefined;
  return `plaintext must be printable ASCII without line breaks or edge spaces for auth_type ${authType}`;
}

/** Writes a new managed secret version into the row: fresh data key, new hint. */
function storeSecret(store: SecretStore, row: Credential, plaintext: string): void {
  const sealed = store.seal(row, plaintext);
  row.kekId = sealed.kekId;
  row.wrappedKey = sealed.wrappedKey;
  row.secretCiphertext = sealed.ciphertext;
  row.maskedHint = maskedHint(plaintext);
}

export function credentialRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();
  const store = createSecretStore(deps.orm, deps.config.vault, deps.vaultClient);
  const { layout } = deps.config.vault;
  /** A vault_ref outside the caller's own prefix: 400, one message, decided without asking the vault. */
  const refuseForeignRef = (tenantId: string, ref: string | undefined) => {
    if (ref !== undefined && !resolveTenantVaultRef(layout, tenantId, ref))
      throw badRequest(vaultRefRule(layout, tenantId));
  };

  router.post('/credentials', async (ctx) => {
    // Every rule across fields (source, auth_type, plaintext, header_name) is the schema's.
    const input = parseOr400(CredentialCreateInput, ctx.request.body);
    const vaultRef = input.source === 'vault' ? input.vault_ref : undefined;
    const plaintext = input.source === 'managed' ? input.plaintext : undefined;
    refuseForeignRef(ctx.state.caller.tenantId, vaultRef);

    const em = deps.orm.em.fork();
    const now = new Date();
    const row = em.create(CredentialSchema, {
      id: newId('cred'),
      tenantId: ctx.state.caller.tenantId,
      name: input.name,
      authType: input.auth_type,
      source: input.source,
      headerName: input.auth_type === 'api_key' ? (input.header_name ?? null) : null,
      maskedHint: null,
      vaultRef: vaultRef ?? null,
      version: 1,
      kekId: null,
      wrappedKey: null,
      secretCiphertext: null,
      createdAt: now,
      updatedAt: now,
    });
    if (plaintext !== undefined) storeSecret(store, row, plaintext);
    await flushOr409(em, NAME_TAKEN);
    ctx.status = 201;
    ctx.body = serializeCredential(row);
  });

  router.get('/credentials', async (ctx) => {
    const page = pageOf(parseQuery(CredentialListQuery, ctx.query), 'cred');
    ctx.body = await listPage(
      deps.orm,
      CredentialSchema,
      { tenantId: ctx.state.caller.tenantId },
      page,
      serializeCredential,
    );
  });

  router.get('/credentials/:id', async (ctx) => {
    const row = await ownedRow(deps.orm, CredentialSchema, 'cred', ctx.params.id, ctx.state.caller.tenantId);
    ctx.body = serializeCredential(row);
  });

  router.put('/credentials/:id', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('cred', ctx.params.id)) throw notFound();
    const row = await deps.orm.em.fork().transactional(async (em) => {
      const current = await em.findOne(
        CredentialSchema,
        { id: ctx.params.id, tenantId },
        { lockMode: LockMode.PESSIMISTIC_WRITE },
      );
      if (!current) throw notFound();
      const patch = parseOr400(CredentialUpdateInput, ctx.request.body);
      if (patch.plaintext !== undefined && current.source !== 'managed')
        throw badRequest('plaintext is only valid for source managed');
      if (patch.vault_ref !== undefined && current.source !== 'vault')
        throw badRequest('vault_ref is only valid for source vault');
      const authType = patch.auth_type ?? current.authType;
      // Leaving api_key drops its header name unless the body sets one (which is then refused).
      const headerName =
        patch.header_name !== undefined
          ? patch.header_name
          : authType === 'api_key'
            ? (current.headerName ?? null)
            : null;
      const hasSecret = patch.plaintext !== undefined || current.secretCiphertext !== null;
      const ruleProblem = credentialRuleError({
        authType,
        source: current.source,
        hasSecret,
        vaultRef: patch.vault_ref ?? current.vaultRef ?? null,
        headerName,
      });
      if (ruleProblem) throw badRequest(ruleProblem);
      refuseForeignRef(tenantId, patch.vault_ref);
      if (current.source === 'managed' && authType !== 'none') {
        if (patch.plaintext !== undefined) {
          const problem = headerSafetyError(authType, patch.plaintext);
          if (problem) throw badRequest(problem);
        } else if (authType !== current.authType) {
          // The stored secret is about to be sent as a header: it must be able to be one.
          const stored = await store.secretOf(current);
          if (stored === null || !isHeaderSafe(stored))
            throw badRequest(`the stored secret cannot be sent for auth_type ${authType}; send a new plaintext`);
        }
      }
      // The tenant's facilitator credential must keep holding a client certificate and key.
      if (
        (patch.plaintext !== undefined || patch.vault_ref !== undefined) &&
        (await isFacilitatorCredential(em, tenantId, current.id))
      ) {
        const problem = await facilitatorSecretProblem(
          async () => patch.plaintext ?? (await deps.vaultClient.read(tenantId, patch.vault_ref!)),
        );
        if (problem) throw badRequest(problem);
      }

      if (patch.name !== undefined) current.name = patch.name;
      current.authType = authType;
      current.headerName = headerName;
      if (patch.plaintext !== undefined) {
        current.version += 1;
        storeSecret(store, current, patch.plaintext);
      }
      if (patch.vault_ref !== undefined) {
        current.version += 1;
        current.vaultRef = patch.vault_ref;
      }
      if (Object.keys(patch).length > 0) current.updatedAt = new Date();
      await flushOr409(em, NAME_TAKEN);
      return current;
    });
    ctx.body = serializeCredential(row);
  });

  router.delete('/credentials/:id', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('cred', ctx.params.id)) throw notFound();
    await deps.orm.em.fork().transactional(async (em) => {
      const current = await em.findOne(
        CredentialSchema,
        { id: ctx.params.id, tenantId },
        { lockMode: LockMode.PESSIMISTIC_WRITE },
      );
      if (!current) throw notFound();
      if (await isCredentialReferenced(em, tenantId, current.id)) throw conflict('credential is still referenced');
      em.remove(current);
      await em.flush();
    });
    ctx.status = 204;
  });

  return router;
}
