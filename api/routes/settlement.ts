// /v1/settlement/config: the tenant's facilitator endpoint and the credential holding the
// client certificate presented to it. One per tenant: PUT creates (201) or replaces (200).
import Router from '@koa/router';
import { LockMode } from '@mikro-orm/core';
import { badRequest, conflict, notFound } from '../errors.ts';
import { AgentSchema } from '../../gateway/db/entities.ts';
import { parseOr400 } from '../validation.ts';
import { upstreamUrlProblem } from '../upstream-url.ts';
import { createSecretStore } from '../../gateway/credentials/secrets.ts';
import { lockReferencedCredential } from '../../gateway/credentials/references.ts';
import { SettlementConfigSchema, type SettlementConfig } from '../../gateway/settlement/entity.ts';
import { SettlementConfigInput } from '../settlement/schema.ts';
import { facilitatorSecretProblem, facilitatorUrlProblem } from '../../gateway/settlement/validate.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

type Row = {
  tenant_id: string;
  facilitator_url: string;
  facilitator_credential_ref: string;
  created_at: Date | string;
  updated_at: Date | string;
  inserted?: boolean;
};

const iso = (d: Date | string) => new Date(d).toISOString();

function view(row: Row) {
  return {
    tenant_id: row.tenant_id,
    facilitator_url: row.facilitator_url,
    facilitator_credential_ref: row.facilitator_credential_ref,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

const fromEntity = (c: SettlementConfig): Row => ({
  tenant_id: c.tenantId,
  facilitator_url: c.facilitatorUrl,
  facilitator_credential_ref: c.facilitatorCredentialRef,
  created_at: c.createdAt,
  updated_at: c.updatedAt,
});

export function settlementRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();
  const store = createSecretStore(deps.orm, deps.config.vault, deps.vaultClient);

  router.get('/settlement/config', async (ctx) => {
    const row = await deps.orm.em.fork().findOne(SettlementConfigSchema, { tenantId: ctx.state.caller.tenantId });
    if (!row) throw notFound('settlement is not configured');
    ctx.body = view(fromEntity(row));
  });

  router.put('/settlement/config', async (ctx) => {
    const input = parseOr400(SettlementConfigInput, ctx.request.body);
    const urlProblem = facilitatorUrlProblem(input.facilitator_url, (url) =>
      upstreamUrlProblem('facilitator_url', url, deps.config.upstream),
    );
    if (urlProblem) throw badRequest(urlProblem);
    const { tenantId } = ctx.state.caller;
    const row = await deps.orm.em.fork().transactional(async (em) => {
      const credential = await lockReferencedCredential(em, tenantId, input.facilitator_credential_ref);
      if (!credential) throw badRequest('facilitator_credential_ref does not name a credential');
      const problem = await facilitatorSecretProblem(() => store.secretOf(credential));
      if (problem) throw badRequest(problem);
      const now = new Date();
      // One statement, so concurrent first PUTs cannot both insert; xmax = 0 marks an insert.
      const [saved] = await em.execute<Row[]>(
        `insert into settlement_configs (tenant_id, facilitator_url, facilitator_credential_ref, created_at, updated_at)
         values (?, ?, ?, ?, ?)
         on conflict (tenant_id) do update
           set facilitator_url = excluded.facilitator_url,
               facilitator_credential_ref = excluded.facilitator_credential_ref,
               updated_at = excluded.updated_at
         returning tenant_id, facilitator_url, facilitator_credential_ref, created_at, updated_at, (xmax = 0) as inserted`,
        [tenantId, input.facilitator_url, credential.id, now, now],
      );
      return saved;
    });
    ctx.status = row.inserted ? 201 : 200;
    ctx.body = view(row);
  });

  router.delete('/settlement/config', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    await deps.orm.em.fork().transactional(async (em) => {
      // Locked first, then the count: an agent made public concurrently holds a share lock on
      // this row until it commits (api/routes/agents.ts), so it is counted or it saw no row.
      const config = await em.findOne(SettlementConfigSchema, { tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
      if (!config) throw notFound('settlement is not configured');
      // Public agents are paid by anonymous payers: their payments must keep being collected.
      const open = await em.count(AgentSchema, { tenantId, public: true, deletedAt: null });
      if (open > 0)
        throw conflict(
          `${open} public agent(s) of this tenant are paid through this configuration; make them private (public: false) first`,
        );
      await em.nativeDelete(SettlementConfigSchema, { tenantId });
    });
    ctx.status = 204;
  });

  return router;
}
