// /v1/agents: the tenant's catalog. Every query is scoped by the token's tenant; another
// tenant's id behaves as absent (404), and a credential_ref to another tenant's credential is
// refused as if it did not exist (400).
import Router from '@koa/router';
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { getAddress } from 'ethers';
import { AgentSchema, type Agent, type Pricing } from '../../gateway/db/entities.ts';
import { newId, isId } from '../../lib/ids.ts';
import { badRequest, conflict, flushOr409, notFound } from '../errors.ts';
import { parseOr400, parseQuery } from '../validation.ts';
import { listPage, ownedRow, pageOf } from '../pagination.ts';
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
import { SettlementConfigSchema } from '../../gateway/settlement/entity.ts';
import { lockReferencedCredential } from '../../gateway/credentials/references.ts';
import { hasRoomForAgent } from '../../gateway/tenant-agents.ts';
import { createKeyedQueue } from '../../lib/keyed-queue.ts';
import type { AgentRows } from '../proxy/agent-row.ts';
import { AgentCardError, type StoredCard } from '../../gateway/a2a/card.ts';
import { canonicalA2aMethod } from '../../gateway/a2a/methods.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const NAME_TAKEN = 'an active or pending agent with this name exists';

function normalisePricing(pricing: PricingInput | null | undefined): Pricing | null | undefined {
  if (!pricing) return pricing;
  // Stored checksummed; the address was validated (and its checksum, if mixed-case) by the schema.
  const stored: Pricing = { ...pricing, pay_to: getAddress(pricing.pay_to.toLowerCase()) };
  // A2A methods under their 1.0 name, whichever spelling was sent (agentRuleError knows them all).
  if (pricing.methods)
    stored.methods = Object.fromEntries(
      Object.entries(pricing.methods).map(([method, price]) => [canonicalA2aMethod(method) ?? method, price]),
    );
  return stored;
}

/** Reads an upstream's Agent Card through the SSRF guard (gateway/a2a/card.ts); wired in api/app.ts. */
/**
 * The card an update leaves: read again when the agent becomes a2a or the update names its
 * upstream_url, changed or not (how a tenant refreshes a card its upstream changed); read before
 * the transaction, cardForUpdate; a 400 when it cannot be read: nothing is changed. Dropped when
 * it stops being a2a.
 */
function a2aCardChange(
  current: Agent,
  protocol: Agent['protocol'],
  upstreamUrl: string | null | undefined,
  read: ReadCard | null,
): Partial<Agent> {
  const url = cardToRead(current, protocol, upstreamUrl);
  if (url === undefined) return protocol !== 'a2a' && current.a2aCard ? { a2aCard: null, a2aCardReadAt: null } : {};
  if (url === null) return { a2aCard: null, a2aCardReadAt: null };
  // Read before the transaction for the agent as it was then: changed since by another write.
  if (read?.url !== url) throw conflict('the agent changed while its upstream card was read: retry');
  return { a2aCard: read.card, a2aCardReadAt: read.at };
}

/** The upstream whose card an update must read; null: the card goes; undefined: nothing to read or drop. */
function cardToRead(
  current: Agent,
  protocol: Agent['protocol'],
  upstreamUrl: string | null | undefined,
): string | null | undefined {
  if (protocol !== 'a2a') return undefined;
  const url = upstreamUrl !== undefined ? upstreamUrl : current.upstreamUrl;
  if (!url) return null;
  if (current.protocol === 'a2a' && upstreamUrl === undefined && current.a2aCard) return undefined;
  return url;
}

/** A card read for an update, before its transaction. */
type ReadCard = { url: string; card: StoredCard; at: Date };

export type CardReader = (upstreamUrl: string) => Promise<StoredCard>;

/** The card of an a2a agent's upstream, or a 400 naming why it could not be read. */
async function readCardOr400(readCard: CardReader, upstreamUrl: string): Promise<StoredCard> {
  try {
    return await readCard(upstreamUrl);
  } catch (err) {
    if (err instanceof AgentCardError) throw badRequest(`upstream_url: ${err.message}`);
    throw err;
  }
}

async function checkCredentialRef(em: EntityManager, tenantId: string, ref: string | null | undefined): Promise<void> {
  if (ref && !(await lockReferencedCredential(em, tenantId, ref)))
    throw badRequest('credential_ref does not name a credential');
}

/**
 * Making an agent public needs the tenant's settlement configured: an anonymous payer's payment
 * must be collected, not only verified. The row is share-locked until the agent's write commits,
 * so a concurrent DELETE /v1/settlement/config (which locks it for update, then counts public
 * agents) either waits and sees this agent public, or has already removed the row.
 */
async function checkSettlementForPublic(em: EntityManager, tenantId: string): Promise<void> {
  const config = await em.findOne(SettlementConfigSchema, { tenantId }, { lockMode: LockMode.PESSIMISTIC_READ });
  if (!config)
    throw badRequest('a public agent needs settlement configured for the tenant (PUT /v1/settlement/config) first');
}

export function agentRoutes(deps: AppDeps, agents: AgentRows, readCard: CardReader): Router<AuthState> {
  const router = new Router<AuthState>();
  const bodies = agentBodies({ rps: deps.config.rateLimit.agentMaxRps, burst: deps.config.rateLimit.agentMaxBurst });
  const serialize = (ctx: Parameters<typeof publicBaseUrl>[0]) => {
    const base = publicBaseUrl(ctx, deps.config.publicAddress);
    return (agent: Agent) => serializeAgent(agent, base);
  };

  /** Loads the tenant's agent for a write, row-locked; 404 when absent, 409 when deleted. */
  async function liveAgentForUpdate(em: EntityManager, tenantId: string, id: string): Promise<Agent> {
    if (!isId('agt', id)) throw notFound();
    const agent = await em.findOne(AgentSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
    if (!agent) throw notFound();
    if (agent.deletedAt) throw conflict('agent is inactive');
    return agent;
  }

  /**
   * A priced agent in a tenant without settlement configured: payments are verified and
   * claimed, never collected (docs/SETTLEMENT.md). Said on the answer that prices it, as a
   * header, so the body stays the Agent resource.
   */
  async function warnIfUncollected(ctx: { set(name: string, value: string): void }, agent: Agent): Promise<void> {
    if (!agent.pricing) return;
    const config = await deps.orm.em.fork().findOne(SettlementConfigSchema, { tenantId: agent.tenantId });
    if (!config)
      ctx.set(
        'X-Gateway-Warning',
        'no settlement configured for this tenant: payments for this agent are verified but not collected (PUT /v1/settlement/config)',
      );
  }

  const createsOfTenant = createKeyedQueue();
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
    // Read before the transaction: an a2a agent is created with its upstream's card or not at all.
    const card =
      state.protocol === 'a2a' && input.upstream_url ? await readCardOr400(readCard, input.upstream_url) : null;
    const { tenantId, userId } = ctx.state.caller;
    // A tenant's creates queue here, one at a time per process, and not on pooled connections
    // waiting for its advisory lock (tenant-agents.ts): a tenant sending many at once cannot
    // hold the pool every other tenant's requests need.
    const agent = await createsOfTenant(tenantId, () =>
      deps.orm.em.fork().transactional(async (em) => {
        // 409: the body is valid; the tenant's state refuses it until one of its agents is deleted.
        if (!(await hasRoomForAgent(em, tenantId, deps.config.tenantMaxAgents)))
          throw conflict(
            `this tenant has ${deps.config.tenantMaxAgents} active or pending agents, the most allowed; delete one first`,
          );
        await checkCredentialRef(em, tenantId, input.credential_ref);
        if (state.public) await checkSettlementForPublic(em, tenantId);
        const now = new Date();
        const created = em.create(AgentSchema, {
          id: newId('agt'),
          tenantId,
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
          pricing: normalisePricing(input.pricing) ?? null,
          rateLimitRps: state.rate_limit_rps,
          rateLimitBurst: state.rate_limit_burst,
          retryNonIdempotent: input.retry_non_idempotent ?? false,
          suspended: false,
          suspendedReason: null,
          public: state.public,
          publicDescription: input.public_description ?? null,
          publicInterface: input.public_interface ?? null,
          a2aCard: card,
          a2aCardReadAt: card ? now : null,
          a2aPassUnknownMethods: input.a2a_pass_unknown_methods ?? false,
          deletedAt: null,
          createdBy: userId,
          createdAt: now,
          updatedAt: now,
        });
        await flushOr409(em, NAME_TAKEN);
        return created;
      }),
    );
    // A public agent is in every replica's discovery catalog before the answer, as a change is.
    if (agent.public) await agents.forget(agent.id);
    await warnIfUncollected(ctx, agent);
    ctx.status = 201;
    ctx.body = serialize(ctx)(agent);
  });

  router.get('/agents', async (ctx) => {
    const query = parseQuery(AgentListQuery, ctx.query);
    const page = pageOf(query, 'agt');
    const where: Record<string, unknown> = { tenantId: ctx.state.caller.tenantId };
    // Inactive (deleted) agents appear only when asked for by status.
    if (query.status === 'inactive') where.deletedAt = { $ne: null };
    else where.deletedAt = null;
    if (query.status === 'pending') where.upstreamUrl = null;
    if (query.status === 'active') where.upstreamUrl = { $ne: null };
    if (query.protocol) where.protocol = query.protocol;
    if (query.tag) where.tags = { $contains: [query.tag] };
    ctx.body = await listPage(deps.orm, AgentSchema, where, page, serialize(ctx));
  });

  router.get('/agents/:id', async (ctx) => {
    ctx.body = serialize(ctx)(await ownedRow(deps.orm, AgentSchema, 'agt', ctx.params.id, ctx.state.caller.tenantId));
  });

  /**
   * The card a valid update will need, read before its transaction: the read takes up to
   * CARD_TIMEOUT_MS on an upstream the tenant chooses, and must hold no pooled connection nor
   * the agent's row lock meanwhile (a tenant's slow upstream would starve every other tenant).
   * Null when the body or URL is refused anyway, or no card is needed (the transaction decides).
   */
  async function cardForUpdate(tenantId: string, id: string, body: unknown): Promise<ReadCard | null> {
    const patch = bodies.patch.safeParse(body);
    if (!patch.success || !isId('agt', id)) return null;
    const { upstream_url: upstreamUrl, protocol } = patch.data;
    if (upstreamUrl && upstreamUrlProblem('upstream_url', upstreamUrl, deps.config.upstream)) return null;
    const current = await deps.orm.em.fork().findOne(AgentSchema, { id, tenantId });
    if (!current || current.deletedAt) return null;
    const url = cardToRead(current, protocol ?? current.protocol, upstreamUrl);
    if (!url) return null;
    return { url, card: await readCardOr400(readCard, url), at: new Date() };
  }

  router.patch('/agents/:id', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    const read = await cardForUpdate(tenantId, ctx.params.id, ctx.request.body);
    const agent = await deps.orm.em.fork().transactional(async (em) => {
      const current = await liveAgentForUpdate(em, tenantId, ctx.params.id);
      const patch = parseOr400(bodies.patch, ctx.request.body);
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
      if (patch.credential_ref !== undefined) await checkCredentialRef(em, tenantId, patch.credential_ref);
      if (patch.public === true) await checkSettlementForPublic(em, tenantId);
      const changes: Partial<Agent> = {
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
      if (patch.pricing !== undefined) changes.pricing = normalisePricing(patch.pricing) ?? null;
      if (patch.retry_non_idempotent !== undefined) changes.retryNonIdempotent = patch.retry_non_idempotent;
      if (patch.public !== undefined) changes.public = patch.public;
      if (patch.public_description !== undefined) changes.publicDescription = patch.public_description;
      if (patch.public_interface !== undefined) changes.publicInterface = patch.public_interface;
      if (patch.a2a_pass_unknown_methods !== undefined) changes.a2aPassUnknownMethods = patch.a2a_pass_unknown_methods;
      Object.assign(changes, a2aCardChange(current, state.protocol, patch.upstream_url, read));
      if (Object.keys(patch).length > 0) changes.updatedAt = new Date();
      em.assign(current, changes);
      await flushOr409(em, NAME_TAKEN);
      return current;
    });
    // The row's trigger tells every replica; this one need not wait for its own notification.
    await agents.forget(agent.id);
    // Priced by this request (the body set pricing): said as on create.
    if ((ctx.request.body as { pricing?: unknown } | undefined)?.pricing) await warnIfUncollected(ctx, agent);
    ctx.body = serialize(ctx)(agent);
  });

  router.delete('/agents/:id', async (ctx) => {
    if (!isId('agt', ctx.params.id)) throw notFound();
    const em = deps.orm.em.fork();
    const agent = await em.findOne(AgentSchema, { id: ctx.params.id, tenantId: ctx.state.caller.tenantId });
    if (!agent) throw notFound();
    // Soft delete: the row stays (invocations and analytics point at it), the name is freed.
    // Deleting an inactive agent again changes nothing.
    if (!agent.deletedAt) {
      const now = new Date();
      await em.nativeUpdate(
        AgentSchema,
        { id: agent.id, tenantId: agent.tenantId, deletedAt: null },
        { deletedAt: now, updatedAt: now },
      );
      await agents.forget(agent.id);
    }
    ctx.status = 204;
  });

  for (const action of ['suspend', 'unsuspend'] as const) {
    router.post(`/agents/:id/${action}`, async (ctx) => {
      const { tenantId } = ctx.state.caller;
      const agent = await deps.orm.em.fork().transactional(async (em) => {
        const current = await liveAgentForUpdate(em, tenantId, ctx.params.id);
        const input =
          action === 'suspend'
            ? parseOr400(AgentSuspendInput, ctx.request.body)
            : parseOr400(AgentUnsuspendInput, ctx.request.body);
        const reason = action === 'suspend' ? ((input as { reason?: string }).reason ?? null) : null;
        em.assign(current, { suspended: action === 'suspend', suspendedReason: reason, updatedAt: new Date() });
        await em.flush();
        return current;
      });
      await agents.forget(agent.id);
      ctx.body = serialize(ctx)(agent);
    });
  }

  return router;
}
