// The tenant's credentials as the management API writes them: create, update, delete, under
// the row locks that keep a referenced credential from going and the facilitator's credential
// holding a client certificate. The secret is write-only: it leaves here only as an envelope
// (managed) or not at all (vault: only its reference is stored). The door
// (api/routes/credentials.ts) parses the bodies and maps the refusals (gateway/refusal.ts).
import { LockMode } from '@mikro-orm/core';
import { newId, isId } from '../../lib/ids.ts';
import type { GatewayDb } from '../db/orm.ts';
import { listPage, ownedRow, type Page } from '../db/pages.ts';
import { absent, conflicting, flushOrConflict, invalid } from '../refusal.ts';
import { facilitatorSecretProblem } from '../settlement/validate.ts';
import { CredentialSchema, type AuthType, type Credential, type CredentialSource } from './entity.ts';
import { isHeaderSafe } from './header-rules.ts';
import { maskedHint } from './hint.ts';
import { isCredentialReferenced, isFacilitatorCredential } from './references.ts';
import { createSecretStore, type SecretStore } from './secrets.ts';
import { resolveTenantVaultRef, vaultRefRule, type VaultClient } from './vault.ts';
import type { VaultConfig } from './config.ts';

const NAME_TAKEN = 'a credential with this name already exists';

/** The state a create or update would leave, as the API's rules across fields see it. */
export type CredentialState = {
  authType: AuthType;
  source: CredentialSource;
  hasSecret: boolean;
  vaultRef: string | null;
  headerName: string | null;
};

/** A new credential as its tenant sends it (the API's rules across fields already checked). */
export type NewCredential = {
  name: string;
  authType: AuthType;
  source: CredentialSource;
  headerName: string | null;
  vaultRef: string | undefined;
  plaintext: string | undefined;
};

/** What an update sets; `touched`: it names any field (its updated_at moves). */
export type CredentialPatch = {
  name?: string;
  authType?: AuthType;
  headerName?: string | null;
  plaintext?: string;
  vaultRef?: string;
  touched: boolean;
};

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

/** Built once per app; `ruleError` is the API's rules across fields (api/credentials/schema.ts). */
export function createCredentialManagement(deps: {
  db: GatewayDb;
  vault: VaultConfig;
  vaultClient: VaultClient;
  ruleError: (state: CredentialState) => string | undefined;
}) {
  const { db, vaultClient, ruleError } = deps;
  const store = createSecretStore(db, deps.vault, vaultClient);
  const { layout } = deps.vault;
  /** A vault_ref outside the tenant's own prefix: refused, one message, decided without asking the vault. */
  const refuseForeignRef = (tenantId: string, ref: string | undefined) => {
    if (ref !== undefined && !resolveTenantVaultRef(layout, tenantId, ref))
      throw invalid(vaultRefRule(layout, tenantId));
  };

  return {
    async create(tenantId: string, fields: NewCredential): Promise<Credential> {
      refuseForeignRef(tenantId, fields.vaultRef);
      const em = db.em.fork();
      const now = new Date();
      const row = em.create(CredentialSchema, {
        id: newId('cred'),
        tenantId,
        name: fields.name,
        authType: fields.authType,
        source: fields.source,
        headerName: fields.headerName,
        maskedHint: null,
        vaultRef: fields.vaultRef ?? null,
        version: 1,
        kekId: null,
        wrappedKey: null,
        secretCiphertext: null,
        createdAt: now,
        updatedAt: now,
      });
      if (fields.plaintext !== undefined) storeSecret(store, row, fields.plaintext);
      await flushOrConflict(em, NAME_TAKEN);
      return row;
    },

    list<V>(tenantId: string, page: Page, view: (row: Credential) => V) {
      return listPage(db, CredentialSchema, { tenantId }, page, view);
    },

    get(tenantId: string, id: string): Promise<Credential> {
      return ownedRow(db, CredentialSchema, 'cred', id, tenantId);
    },

    /** Updates the credential, row-locked; `patchOf` (which may refuse) reads the body once it is found. */
    async update(tenantId: string, id: string, patchOf: () => CredentialPatch): Promise<Credential> {
      if (!isId('cred', id)) throw absent();
      return db.em.fork().transactional(async (em) => {
        const current = await em.findOne(CredentialSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
        if (!current) throw absent();
        const patch = patchOf();
        if (patch.plaintext !== undefined && current.source !== 'managed')
          throw invalid('plaintext is only valid for source managed');
        if (patch.vaultRef !== undefined && current.source !== 'vault')
          throw invalid('vault_ref is only valid for source vault');
        const authType = patch.authType ?? current.authType;
        // Leaving api_key drops its header name unless the patch sets one (which is then refused).
        const headerName =
          patch.headerName !== undefined
            ? patch.headerName
            : authType === 'api_key'
              ? (current.headerName ?? null)
              : null;
        const hasSecret = patch.plaintext !== undefined || current.secretCiphertext !== null;
        const ruleProblem = ruleError({
          authType,
          source: current.source,
          hasSecret,
          vaultRef: patch.vaultRef ?? current.vaultRef ?? null,
          headerName,
        });
        if (ruleProblem) throw invalid(ruleProblem);
        refuseForeignRef(tenantId, patch.vaultRef);
        if (current.source === 'managed' && authType !== 'none') {
          if (patch.plaintext !== undefined) {
            const problem = headerSafetyError(authType, patch.plaintext);
            if (problem) throw invalid(problem);
          } else if (authType !== current.authType) {
            // The stored secret is about to be sent as a header: it must be able to be one.
            const stored = await store.secretOf(current);
            if (stored === null || !isHeaderSafe(stored))
              throw invalid(`the stored secret cannot be sent for auth_type ${authType}; send a new plaintext`);
          }
        }
        // The tenant's facilitator credential must keep holding a client certificate and key.
        if (
          (patch.plaintext !== undefined || patch.vaultRef !== undefined) &&
          (await isFacilitatorCredential(em, tenantId, current.id))
        ) {
          const problem = await facilitatorSecretProblem(
            async () => patch.plaintext ?? (await vaultClient.read(tenantId, patch.vaultRef!)),
          );
          if (problem) throw invalid(problem);
        }

        if (patch.name !== undefined) current.name = patch.name;
        current.authType = authType;
        current.headerName = headerName;
        if (patch.plaintext !== undefined) {
          current.version += 1;
          storeSecret(store, current, patch.plaintext);
        }
        if (patch.vaultRef !== undefined) {
          current.version += 1;
          current.vaultRef = patch.vaultRef;
        }
        if (patch.touched) current.updatedAt = new Date();
        await flushOrConflict(em, NAME_TAKEN);
        return current;
      });
    },

    /** Deletes the credential unless an agent or the settlement configuration still names it. */
    async remove(tenantId: string, id: string): Promise<void> {
      if (!isId('cred', id)) throw absent();
      await db.em.fork().transactional(async (em) => {
        const current = await em.findOne(CredentialSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
        if (!current) throw absent();
        if (await isCredentialReferenced(em, tenantId, current.id)) throw conflicting('credential is still referenced');
        em.remove(current);
        await em.flush();
      });
    },
  };
}
