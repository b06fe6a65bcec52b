// The tenant's settlement configuration: its facilitator endpoint and the credential holding the
// client certificate presented to it, one per tenant. The door (api/routes/settlement.ts) checks
// the URL and maps the refusals (gateway/refusal.ts).
import { LockMode } from '@mikro-orm/core';
import { AgentSchema } from '../db/entities.ts';
import type { GatewayDb } from '../db/orm.ts';
import { createSecretStore } from '../credentials/secrets.ts';
import { lockReferencedCredential } from '../credentials/references.ts';
import type { VaultClient } from '../credentials/vault.ts';
import type { VaultConfig } from '../credentials/config.ts';
import { absent, conflicting, invalid } from '../refusal.ts';
import { SettlementConfigSchema } from './entity.ts';
import { facilitatorSecretProblem } from './validate.ts';

/** A stored configuration as its statement returns it. */
export type SettlementConfigRow = {
  tenant_id: string;
  facilitator_url: string;
  facilitator_credential_ref: string;
  /** batch-settlement channels: seconds between claim rounds. */
  claim_every_seconds: number;
  /** batch-settlement channels: the unclaimed amount that claims sooner (base units); null: none. */
  claim_threshold: string | null;
  created_at: Date | string;
  updated_at: Date | string;
  /** From a save: the configuration was created rather than replaced. */
  inserted?: boolean;
};

const NOT_CONFIGURED = 'settlement is not configured';

/** How the tenant's batch-settlement channels are claimed (gateway/payment/channel-claims/due.ts). */
export type ClaimSettings = { everySeconds: number; threshold: string | null };

export function createSettlementConfiguration(deps: { db: GatewayDb; vault: VaultConfig; vaultClient: VaultClient }) {
  const { db } = deps;
  const store = createSecretStore(db, deps.vault, deps.vaultClient);

  return {
    /** The tenant's configuration; absent when it has none. */
    async get(tenantId: string): Promise<SettlementConfigRow> {
      const c = await db.em.fork().findOne(SettlementConfigSchema, { tenantId });
      if (!c) throw absent(NOT_CONFIGURED);
      return {
        tenant_id: c.tenantId,
        facilitator_url: c.facilitatorUrl,
        facilitator_credential_ref: c.facilitatorCredentialRef,
        claim_every_seconds: c.claimEverySeconds,
        claim_threshold: c.claimThreshold ?? null,
        created_at: c.createdAt,
        updated_at: c.updatedAt,
      };
    },

    /**
     * Creates or replaces it; the credential must be the tenant's and hold a client certificate
     * and key. `claims`: how the tenant's batch-settlement channels are claimed.
     */
    save(
      tenantId: string,
      facilitatorUrl: string,
      credentialRef: string,
      claims: ClaimSettings,
    ): Promise<SettlementConfigRow> {
      return db.em.fork().transactional(async (em) => {
        const credential = await lockReferencedCredential(em, tenantId, credentialRef);
        if (!credential) throw invalid('facilitator_credential_ref does not name a credential');
        const problem = await facilitatorSecretProblem(() => store.secretOf(credential));
        if (problem) throw invalid(problem);
        const now = new Date();
        // One statement, so concurrent first saves cannot both insert; xmax = 0 marks an insert.
        const [saved] = await em.execute<SettlementConfigRow[]>(
          `insert into settlement_configs (tenant_id, facilitator_url, facilitator_credential_ref, claim_every_seconds,
                                          claim_threshold, created_at, updated_at)
         values (?, ?, ?, ?, ?, ?, ?)
         on conflict (tenant_id) do update
           set facilitator_url = excluded.facilitator_url,
               facilitator_credential_ref = excluded.facilitator_credential_ref,
               claim_every_seconds = excluded.claim_every_seconds,
               claim_threshold = excluded.claim_threshold,
               updated_at = excluded.updated_at
         returning tenant_id, facilitator_url, facilitator_credential_ref, claim_every_seconds,
                   claim_threshold::text, created_at, updated_at, (xmax = 0) as inserted`,
          [tenantId, facilitatorUrl, credential.id, claims.everySeconds, claims.threshold, now, now],
        );
        return saved;
      });
    },

    /** Removes it, unless a public agent of the tenant is still paid through it. */
    async remove(tenantId: string): Promise<void> {
      await db.em.fork().transactional(async (em) => {
        // Locked first, then the count: an agent made public concurrently holds a share lock on
        // this row until it commits (gateway/agents/lifecycle.ts), so it is counted or it saw no row.
        const config = await em.findOne(SettlementConfigSchema, { tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
        if (!config) throw absent(NOT_CONFIGURED);
        // Public agents are paid by anonymous payers: their payments must keep being collected.
        const open = await em.count(AgentSchema, { tenantId, public: true, deletedAt: null });
        if (open > 0)
          throw conflicting(
            `${open} public agent(s) of this tenant are paid through this configuration; make them private (public: false) first`,
          );
        await em.nativeDelete(SettlementConfigSchema, { tenantId });
      });
    },
  };
}
