// The agent lifecycle: create, update, delete, suspend and unsuspend, each a write under the
// locks that keep the tenant's rules on every replica, then the agent forgotten by every gate
// cache before the writer returns (gateway/agents/rows.ts). The door (api/routes/agents.ts)
// parses the bodies, checks the API's rules on the state a write would leave and maps the
// refusals (gateway/refusal.ts) to its answers.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { getAddress } from 'ethers';
import { AgentSchema, type Agent, type Pricing } from '../db/entities.ts';
import type { GatewayDb } from '../db/orm.ts';
import { listPage, ownedRow, type Page } from '../db/pages.ts';
import { newId, isId } from '../../lib/ids.ts';
import { createKeyedQueue } from '../../lib/keyed-queue.ts';
import { SettlementConfigSchema } from '../settlement/entity.ts';
import { lockReferencedCredential } from '../credentials/references.ts';
import { AgentCardError, type StoredCard } from '../a2a/card.ts';
import { canonicalA2aMethod } from '../a2a/methods.ts';
import { withChannelDefaults } from '../payment/channel-terms.ts';
import { absent, conflicting, flushOrConflict, invalid } from '../refusal.ts';
import { hasRoomForAgent } from './tenant-bound.ts';
import type { AgentRows } from './rows.ts';

const NAME_TAKEN = 'an active or pending agent with this name exists';

/** What a tenant sets on a new agent; the rest (id, owner, card, times) is the lifecycle's. */
export type NewAgent = Pick<
  Agent,
  | 'name'
  | 'description'
  | 'tags'
  | 'metadata'
  | 'upstreamUrl'
  | 'credentialRef'
  | 'emitReceipts'
  | 'captureBody'
  | 'protocol'
  | 'mcpTransport'
  | 'mcpProtocolVersion'
  | 'pricing'
  | 'rateLimitRps'
  | 'rateLimitBurst'
  | 'retryNonIdempotent'
  | 'public'
  | 'publicDescription'
  | 'publicInterface'
  | 'a2aPassUnknownMethods'
>;

/**
 * An update as the door decided it on the locked agent: the fields it sets (the protocol always),
 * what it names that must be checked, and whether it changes anything at all.
 */
export type AgentUpdate = {
  changes: Partial<NewAgent> & Pick<Agent, 'protocol'>;
  /** The credential_ref the update sets (checked to name one of the tenant's credentials); undefined: not set. */
  credentialRef: string | null | undefined;
  /** The update sets public to true: the tenant's settlement must be configured. */
  makesPublic: boolean;
  /** The upstream_url the update names, changed or not; undefined: not named. */
  upstreamUrl: string | null | undefined;
  /** The update names any field (its updated_at moves). */
  touched: boolean;
};

/** The filters of the agent list. */
export type AgentFilter = { status?: 'pending' | 'active' | 'inactive'; protocol?: Agent['protocol']; tag?: string };

/** Reads an upstream's Agent Card through the SSRF guard (gateway/a2a/card.ts). */
export type CardReader = (upstreamUrl: string) => Promise<StoredCard>;

/** A card read for an update, before its transaction. */
type ReadCard = { url: string; card: StoredCard; at: Date };

function normalisePricing(pricing: Pricing | null | undefined): Pricing | null | undefined {
  if (!pricing) return pricing;
  // Stored checksummed; the address was validated (and its checksum, if mixed-case) by the schema.
  // A channel-priced agent's withdrawal delay stored as its challenge will offer it (its default when not given).
  const stored: Pricing = withChannelDefaults({ ...pricing, pay_to: getAddress(pricing.pay_to.toLowerCase()) });
  // A2A methods under their 1.0 name, whichever spelling was sent (the API's rules know them all).
  if (pricing.methods)
    stored.methods = Object.fromEntries(
      Object.entries(pricing.methods).map(([method, price]) => [canonicalA2aMethod(method) ?? method, price]),
    );
  return stored;
}

/**
 * The card an update leaves: read again when the agent becomes a2a or the update names its
 * upstream_url, changed or not (how a tenant refreshes a card its upstream changed); read before
 * the transaction, cardForUpdate; refused when it cannot be read: nothing is changed. Dropped when
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
  if (read?.url !== url) throw conflicting('the agent changed while its upstream card was read: retry');
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

/** The card of an a2a agent's upstream, or a refusal naming why it could not be read. */
async function readCardOrRefuse(readCard: CardReader, upstreamUrl: string): Promise<StoredCard> {
  try {
    return await readCard(upstreamUrl);
  } catch (err) {
    if (err instanceof AgentCardError) throw invalid(`upstream_url: ${err.message}`);
    throw err;
  }
}

async function checkCredentialRef(em: EntityManager, tenantId: string, ref: string | null | undefined): Promise<void> {
  if (ref && !(await lockReferencedCredential(em, tenantId, ref)))
    throw invalid('credential_ref does not name a credential');
}

/**
 * Making an agent public needs the tenant's settlement configured: an anonymous payer's payment
 * must be collected, not only verified. The row is share-locked until the agent's write commits,
 * so a concurrent removal of the configuration (gateway/settlement/configuration.ts, which locks it for
 * update, then counts public agents) either waits and sees this agent public, or has already
 * removed the row.
 */
async function checkSettlementForPublic(em: EntityManager, tenantId: string): Promise<void> {
  const config = await em.findOne(SettlementConfigSchema, { tenantId }, { lockMode: LockMode.PESSIMISTIC_READ });
  if (!config)
    throw invalid('a public agent needs settlement configured for the tenant (PUT /v1/settlement/config) first');
}

/** Loads the tenant's agent for a write, row-locked; absent when there is none, a conflict when deleted. */
async function liveAgentForUpdate(em: EntityManager, tenantId: string, id: string): Promise<Agent> {
  if (!isId('agt', id)) throw absent();
  const agent = await em.findOne(AgentSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
  if (!agent) throw absent();
  if (agent.deletedAt) throw conflicting('agent is inactive');
  return agent;
}

/** Built once per app (api/routes/agents.ts wires it with the gate's agent cache). */
export function createAgentLifecycle(deps: {
  db: GatewayDb;
  agents: AgentRows;
  /** TENANT_MAX_AGENTS: live (active or pending) agents a tenant may have. */
  tenantMaxAgents: number;
  readCard: CardReader;
}) {
  const { db, agents, tenantMaxAgents, readCard } = deps;
  const createsOfTenant = createKeyedQueue();

  return {
    /** The tenant's agents in creation order, one page; deleted ones only when asked for by status. */
    list<V>(tenantId: string, filter: AgentFilter, page: Page, view: (agent: Agent) => V) {
      const where: Record<string, unknown> = { tenantId };
      if (filter.status === 'inactive') where.deletedAt = { $ne: null };
      else where.deletedAt = null;
      if (filter.status === 'pending') where.upstreamUrl = null;
      if (filter.status === 'active') where.upstreamUrl = { $ne: null };
      if (filter.protocol) where.protocol = filter.protocol;
      if (filter.tag) where.tags = { $contains: [filter.tag] };
      return listPage(db, AgentSchema, where, page, view);
    },

    /** The tenant's agent, deleted or not; absent otherwise. */
    get(tenantId: string, id: string): Promise<Agent> {
      return ownedRow(db, AgentSchema, 'agt', id, tenantId);
    },

    /**
     * A priced agent in a tenant without settlement configured: payments are verified and
     * claimed, never collected (docs/SETTLEMENT.md).
     */
    async paymentsUncollected(agent: Agent): Promise<boolean> {
      if (!agent.pricing) return false;
      return !(await db.em.fork().findOne(SettlementConfigSchema, { tenantId: agent.tenantId }));
    },

    /** Creates the agent; an a2a agent with its upstream's card, read first, or not at all. */
    async create(tenantId: string, userId: string, fields: NewAgent): Promise<Agent> {
      const card =
        fields.protocol === 'a2a' && fields.upstreamUrl ? await readCardOrRefuse(readCard, fields.upstreamUrl) : null;
      // A tenant's creates queue here, one at a time per process, and not on pooled connections
      // waiting for its advisory lock (tenant-bound.ts): a tenant sending many at once cannot
      // hold the pool every other tenant's requests need.
      const agent = await createsOfTenant(tenantId, () =>
        db.em.fork().transactional(async (em) => {
          // A conflict: the body is valid; the tenant's state refuses it until one of its agents is deleted.
          if (!(await hasRoomForAgent(em, tenantId, tenantMaxAgents)))
            throw conflicting(
              `this tenant has ${tenantMaxAgents} active or pending agents, the most allowed; delete one first`,
            );
          await checkCredentialRef(em, tenantId, fields.credentialRef);
          if (fields.public) await checkSettlementForPublic(em, tenantId);
          const now = new Date();
          const created = em.create(AgentSchema, {
            ...fields,
            id: newId('agt'),
            tenantId,
            pricing: normalisePricing(fields.pricing) ?? null,
            suspended: false,
            suspendedReason: null,
            a2aCard: card,
            a2aCardReadAt: card ? now : null,
            deletedAt: null,
            createdBy: userId,
            createdAt: now,
            updatedAt: now,
          });
          await flushOrConflict(em, NAME_TAKEN);
          return created;
        }),
      );
      // A public agent is in every replica's discovery catalog before the answer, as a change is.
      if (agent.public) await agents.forget(agent.id);
      return agent;
    },

    /**
     * The card a valid update will need, read before its transaction: the read takes up to
     * CARD_TIMEOUT_MS on an upstream the tenant chooses, and must hold no pooled connection nor
     * the agent's row lock meanwhile (a tenant's slow upstream would starve every other tenant).
     * Null when no card is needed (the transaction decides).
     */
    async cardForUpdate(
      tenantId: string,
      id: string,
      named: { protocol: Agent['protocol'] | undefined; upstreamUrl: string | null | undefined },
    ): Promise<ReadCard | null> {
      if (!isId('agt', id)) return null;
      const current = await db.em.fork().findOne(AgentSchema, { id, tenantId });
      if (!current || current.deletedAt) return null;
      const url = cardToRead(current, named.protocol ?? current.protocol, named.upstreamUrl);
      if (!url) return null;
      return { url, card: await readCardOrRefuse(readCard, url), at: new Date() };
    },

    /**
     * Updates the live agent, row-locked: `decide` sees it and says what the update sets (it may
     * refuse: the body is parsed and checked against the agent as it is); `read` is
     * cardForUpdate's.
     */
    async update(
      tenantId: string,
      id: string,
      read: ReadCard | null,
      decide: (current: Agent) => AgentUpdate,
    ): Promise<Agent> {
      const agent = await db.em.fork().transactional(async (em) => {
        const current = await liveAgentForUpdate(em, tenantId, id);
        const update = decide(current);
        if (update.credentialRef !== undefined) await checkCredentialRef(em, tenantId, update.credentialRef);
        if (update.makesPublic) await checkSettlementForPublic(em, tenantId);
        const changes: Partial<Agent> = { ...update.changes };
        if (update.changes.pricing !== undefined) changes.pricing = normalisePricing(update.changes.pricing) ?? null;
        Object.assign(changes, a2aCardChange(current, update.changes.protocol, update.upstreamUrl, read));
        if (update.touched) changes.updatedAt = new Date();
        em.assign(current, changes);
        await flushOrConflict(em, NAME_TAKEN);
        return current;
      });
      // The row's trigger tells every replica; this one need not wait for its own notification.
      await agents.forget(agent.id);
      return agent;
    },

    /**
     * Soft delete: the row stays (invocations and analytics point at it), the name is freed.
     * Deleting an inactive agent again changes nothing.
     */
    async remove(tenantId: string, id: string): Promise<void> {
      if (!isId('agt', id)) throw absent();
      const em = db.em.fork();
      const agent = await em.findOne(AgentSchema, { id, tenantId });
      if (!agent) throw absent();
      if (!agent.deletedAt) {
        const now = new Date();
        await em.nativeUpdate(
          AgentSchema,
          { id: agent.id, tenantId: agent.tenantId, deletedAt: null },
          { deletedAt: now, updatedAt: now },
        );
        await agents.forget(agent.id);
      }
    },

    /** Suspends or unsuspends the live agent, row-locked; `reasonOf` (which may refuse) runs under the lock. */
    async setSuspended(
      tenantId: string,
      id: string,
      suspended: boolean,
      reasonOf: () => string | null,
    ): Promise<Agent> {
      const agent = await db.em.fork().transactional(async (em) => {
        const current = await liveAgentForUpdate(em, tenantId, id);
        const reason = reasonOf();
        em.assign(current, { suspended, suspendedReason: reason, updatedAt: new Date() });
        await em.flush();
        return current;
      });
      await agents.forget(agent.id);
      return agent;
    },
  };
}
