// /v1/agents: the tenant's catalog. Every query is scoped by the token's tenant; another
// tenant's id behaves as absent (404), and a credential_ref to another tenant's credential is
// refused as if it did not exist (400). The lifecycle and its locks are the domain's
// (gateway/agents/lifecycle.ts); this maps the bodies to it and checks the API's rules
// (api/agents/schema.ts) on the state a write would leave.
import Router from '@koa/router';
import type { Agent } from '../../gateway/db/entities.ts';
import { badRequest } from '../errors.ts';
import { parseOr400, parseQuery } from '../validation.ts';
import { pageOf } from '../pagination.ts';
import { AgentListQuery } from '../agents/view.ts';
import {
  AgentSuspendInput,
  AgentUnsuspendInput,
  agentBodies,
  agentRuleError,
  type AgentRuleState,
  type PricingInput,
} from '../agents/schema.ts';
import { upstreamUrlProblem } from '../upstream-url.ts';
import { serializeAgent } from '../agents/serialize.ts';
import { publicBaseUrl } from '../public-url.ts';
import { createAgentLifecycle, type AgentUpdate, type CardReader } from '../../gateway/agents/lifecycle.ts';
import type { AgentRows } from '../../gateway/agents/rows.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

/** The header a priced agent's answer carries while its tenant has no settlement configured. */
const UNCOLLECTED_WARNING =
  'no settlement configured for this tenant: payments for this agent are verified but not collected (PUT /v1/settlement/config)';

export function agentRoutes(deps: AppDeps, agents: AgentRows, readCard: CardReader): Router<AuthState> {
  const router = new Router<AuthState>();
  const lifecycle = createAgentLifecycle({
    db: deps.orm,
    agents,
    tenantMaxAgents: deps.config.tenantMaxAgents,
    readCard,
  });
  const bodies = agentBodies({ rps: deps.config.rateLimit.agentMaxRps, burst: deps.config.rateLimit.agentMaxBurst });
  const serialize = (ctx: Parameters<typeof publicBaseUrl>[0]) => {
    const base = publicBaseUrl(ctx, deps.config.publicAddress);
    return (agent: Agent) => serializeAgent(agent, base);
  };

  /**
   * A priced agent in a tenant without settlement configured: payments are verified and
   * claimed, never collected (docs/SETTLEMENT.md). Said on the answer that prices it, as a
   * header, so the body stays the Agent resource.
   */
  async function warnIfUncollected(ctx: { set(name: string, value: string): void }, agent: Agent): Promise<void> {
    if (await lifecycle.paymentsUncollected(agent)) ctx.set('X-Gateway-Warning', UNCOLLECTED_WARNING);
  }

  router.post('/agents', async (ctx) => {
    const input = parseOr400(bodies.create, ctx.request.body);
    const state: AgentRuleState = {
      protocol: input.protocol ?? 'http',
      mcp_transport: input.mcp_transport ?? null,
      mcp_protocol_version: input.mcp_protocol_version ?? null,
      pricing: input.pricing ?? null,
      rate_limit_rps: input.rate_limit_rps ?? null,
      rate_limit_burst: input.rate_limit_burst ?? null,
      public: input.public ?? false,
    };
    const problem =
      agentRuleError(state) ??
      (input.upstream_url ? upstreamUrlProblem('upstream_url', input.upstream_url, deps.config.upstream) : undefined);
    if (problem) throw badRequest(problem);
    const { tenantId, userId } = ctx.state.caller;
    const agent = await lifecycle.create(tenantId, userId, {
      name: input.name,
      description: input.description ?? null,
      tags: input.tags ?? [],
      metadata: input.metadata ?? {},
      upstreamUrl: input.upstream_url ?? null,
      credentialRef: input.credential_ref ?? null,
      emitReceipts: input.emit_receipts ?? false,
      captureBody: input.capture_body ?? false,
      protocol: state.protocol,
      mcpTransport: state.mcp_transport,
      mcpProtocolVersion: state.mcp_protocol_version,
      pricing: input.pricing ?? null,
      rateLimitRps: state.rate_limit_rps,
      rateLimitBurst: state.rate_limit_burst,
      retryNonIdempotent: input.retry_non_idempotent ?? false,
      public: state.public,
      publicDescription: input.public_description ?? null,
      publicInterface: input.public_interface ?? null,
      a2aPassUnknownMethods: input.a2a_pass_unknown_methods ?? false,
    });
    await warnIfUncollected(ctx, agent);
    ctx.status = 201;
    ctx.body = serialize(ctx)(agent);
  });

  router.get('/agents', async (ctx) => {
    const query = parseQuery(AgentListQuery, ctx.query);
    const page = pageOf(query, 'agt');
    ctx.body = await lifecycle.list(ctx.state.caller.tenantId, query, page, serialize(ctx));
  });

  router.get('/agents/:id', async (ctx) => {
    ctx.body = serialize(ctx)(await lifecycle.get(ctx.state.caller.tenantId, ctx.params.id));
  });

  /**
   * The card a valid update will need, read before its transaction (the lifecycle's
   * cardForUpdate). Null when the body or URL is refused anyway, or no card is needed.
   */
  async function cardForUpdate(tenantId: string, id: string, body: unknown) {
    const patch = bodies.patch.safeParse(body);
    if (!patch.success) return null;
    const { upstream_url: upstreamUrl, protocol } = patch.data;
    if (upstreamUrl && upstreamUrlProblem('upstream_url', upstreamUrl, deps.config.upstream)) return null;
    return lifecycle.cardForUpdate(tenantId, id, { protocol, upstreamUrl });
  }

  /** What a PATCH body sets on the agent as it is (locked): parsed and its rules checked on the state it leaves. */
  function decideUpdate(body: unknown, current: Agent): AgentUpdate {
    const patch = parseOr400(bodies.patch, body);
    const state: AgentRuleState = {
      protocol: patch.protocol ?? current.protocol,
      mcp_transport: patch.mcp_transport !== undefined ? patch.mcp_transport : (current.mcpTransport ?? null),
      mcp_protocol_version:
        patch.mcp_protocol_version !== undefined ? patch.mcp_protocol_version : (current.mcpProtocolVersion ?? null),
      pricing: patch.pricing !== undefined ? patch.pricing : ((current.pricing as PricingInput | null) ?? null),
      rate_limit_rps:
        patch.rate_limit_rps !== undefined
          ? patch.rate_limit_rps
          : current.rateLimitRps == null
            ? null
            : Number(current.rateLimitRps),
      rate_limit_burst:
        patch.rate_limit_burst !== undefined ? patch.rate_limit_burst : (current.rateLimitBurst ?? null),
      public: patch.public ?? current.public,
    };
    // The URL is checked when it is being set: an allow-list change must not freeze other edits.
    const problem =
      agentRuleError(state) ??
      (patch.upstream_url ? upstreamUrlProblem('upstream_url', patch.upstream_url, deps.config.upstream) : undefined);
    if (problem) throw badRequest(problem);
    const changes: AgentUpdate['changes'] = {
      protocol: state.protocol,
      mcpTransport: state.mcp_transport,
      mcpProtocolVersion: state.mcp_protocol_version,
      rateLimitRps: state.rate_limit_rps,
      rateLimitBurst: state.rate_limit_burst,
    };
    if (patch.name !== undefined) changes.name = patch.name;
    if (patch.description !== undefined) changes.description = patch.description;
    if (patch.tags !== undefined) changes.tags = patch.tags;
    if (patch.metadata !== undefined) changes.metadata = patch.metadata;
    if (patch.upstream_url !== undefined) changes.upstreamUrl = patch.upstream_url;
    if (patch.credential_ref !== undefined) changes.credentialRef = patch.credential_ref;
    if (patch.emit_receipts !== undefined) changes.emitReceipts = patch.emit_receipts;
    if (patch.capture_body !== undefined) changes.captureBody = patch.capture_body;
    if (patch.pricing !== undefined) changes.pricing = patch.pricing;
    if (patch.retry_non_idempotent !== undefined) changes.retryNonIdempotent = patch.retry_non_idempotent;
    if (patch.public !== undefined) changes.public = patch.public;
    if (patch.public_description !== undefined) changes.publicDescription = patch.public_description;
    if (patch.public_interface !== undefined) changes.publicInterface = patch.public_interface;
    if (patch.a2a_pass_unknown_methods !== undefined) changes.a2aPassUnknownMethods = patch.a2a_pass_unknown_methods;
    return {
      changes,
      credentialRef: patch.credential_ref,
      makesPublic: patch.public === true,
      upstreamUrl: patch.upstream_url,
      touched: Object.keys(patch).length > 0,
    };
  }

  router.patch('/agents/:id', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    const read = await cardForUpdate(tenantId, ctx.params.id, ctx.request.body);
    const agent = await lifecycle.update(tenantId, ctx.params.id, read, (current) =>
      decideUpdate(ctx.request.body, current),
    );
    // Priced by this request (the body set pricing): said as on create.
    if ((ctx.request.body as { pricing?: unknown } | undefined)?.pricing) await warnIfUncollected(ctx, agent);
    ctx.body = serialize(ctx)(agent);
  });

  router.delete('/agents/:id', async (ctx) => {
    await lifecycle.remove(ctx.state.caller.tenantId, ctx.params.id);
    ctx.status = 204;
  });

  for (const action of ['suspend', 'unsuspend'] as const) {
    router.post(`/agents/:id/${action}`, async (ctx) => {
      // The body is read once the agent is found and locked: a missing agent is a 404 whatever it sent.
      const reasonOf = () => {
        if (action === 'unsuspend') {
          parseOr400(AgentUnsuspendInput, ctx.request.body);
          return null;
        }
        return (parseOr400(AgentSuspendInput, ctx.request.body) as { reason?: string }).reason ?? null;
      };
      const { tenantId } = ctx.state.caller;
      const agent = await lifecycle.setSuspended(tenantId, ctx.params.id, action === 'suspend', reasonOf);
      ctx.body = serialize(ctx)(agent);
    });
  }

  return router;
}
