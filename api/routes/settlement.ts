// /v1/settlement/config: the tenant's facilitator endpoint and the credential holding the
// client certificate presented to it (gateway/settlement/configuration.ts), and how its
// batch-settlement channels are claimed (claim_every_seconds, claim_threshold). One per tenant:
// PUT creates (201) or replaces (200).
import Router from '@koa/router';
import { badRequest } from '../errors.ts';
import { parseOr400 } from '../validation.ts';
import { upstreamUrlProblem } from '../upstream-url.ts';
import { createSettlementConfiguration, type SettlementConfigRow } from '../../gateway/settlement/configuration.ts';
import { DEFAULT_CLAIM_EVERY_SECONDS, SettlementConfigInput } from '../settlement/schema.ts';
import { facilitatorUrlProblem } from '../../gateway/settlement/validate.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const iso = (d: Date | string) => new Date(d).toISOString();

function view(row: SettlementConfigRow) {
  return {
    tenant_id: row.tenant_id,
    facilitator_url: row.facilitator_url,
    facilitator_credential_ref: row.facilitator_credential_ref,
    claim_every_seconds: row.claim_every_seconds,
    claim_threshold: row.claim_threshold === null ? null : String(row.claim_threshold),
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

export function settlementRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();
  const configuration = createSettlementConfiguration({
    db: deps.orm,
    vault: deps.config.vault,
    vaultClient: deps.vaultClient,
  });

  router.get('/settlement/config', async (ctx) => {
    ctx.body = view(await configuration.get(ctx.state.caller.tenantId));
  });

  router.put('/settlement/config', async (ctx) => {
    const input = parseOr400(SettlementConfigInput, ctx.request.body);
    const urlProblem = facilitatorUrlProblem(input.facilitator_url, (url) =>
      upstreamUrlProblem('facilitator_url', url, deps.config.upstream),
    );
    if (urlProblem) throw badRequest(urlProblem);
    const row = await configuration.save(
      ctx.state.caller.tenantId,
      input.facilitator_url,
      input.facilitator_credential_ref,
      {
        everySeconds: input.claim_every_seconds ?? DEFAULT_CLAIM_EVERY_SECONDS,
        threshold: input.claim_threshold ?? null,
      },
    );
    ctx.status = row.inserted ? 201 : 200;
    ctx.body = view(row);
  });

  router.delete('/settlement/config', async (ctx) => {
    await configuration.remove(ctx.state.caller.tenantId);
    ctx.status = 204;
  });

  return router;
}
