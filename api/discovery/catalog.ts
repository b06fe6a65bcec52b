// The discovery catalog (docs/API.md "Selling an agent to any x402 client", "Finding agents"):
// every public agent as x402 Bazaar resources, in the shape @x402/extensions' client reads
// (`DiscoveryResource`). An http agent is one resource, its streaming URL (a generic x402 client
// gets the agent's answer in the response; the transactional URL is on the agent's page); a
// public MCP agent is one resource per priced tool, at its streaming URL (where MCP clients
// connect), each with its own price and argument schema: its tenant's, else the one its
// upstream's own tools/list gives (tool-schemas.ts).
//
// The catalog is read from the database once and kept in memory by the change feed
// (gateway/db/feed-cache.ts): any agent's write, on any replica, drops it, so an agent turned
// private, suspended or deleted leaves the catalog before its writer answers; concurrent
// rebuilds share one read. Entries hold URL paths: the base is the request's (PUBLIC_URL, or
// the request's host), added to the page only. Nothing of a credential, an upstream URL, a
// tenant or the agent's own tags and metadata is in an entry: its name, public description,
// price, pay-to address and public interface only.
//
// A metered (upto) agent's entry names its tenant facilitator's address, read from that
// facilitator's /supported (gateway/payment/flow.ts facilitatorKinds, cached a few minutes).
// When it cannot be read, the agent is left out and the catalog built without it is not kept,
// so the next request reads the facilitator again: one tenant's facilitator never breaks the
// catalog for the other agents.
import { isValidServiceName } from '@x402/extensions/bazaar';
import type { z } from 'zod';
import type { Agent } from '../../gateway/db/entities.ts';
import type { GatewayDb } from '../../gateway/db/orm.ts';
import { callablePublicAgents } from '../../gateway/discovery/public-agents.ts';
import type { ChangeFeed } from '../../gateway/db/change-feed.ts';
import { createFeedCache } from '../../gateway/db/feed-cache.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { publicAgentUrls } from '../agents/serialize.ts';
import { requirementsV2 } from '../../gateway/payment/dialect.ts';
import { facilitatorKinds, type PaymentDeps, type PaymentGate } from '../../gateway/payment/flow.ts';
import { isCharged, priceOf } from '../../gateway/payment/pricing.ts';
import { challengeEntries } from '../../gateway/payment/schemes/index.ts';
import type { SupportedKind } from '../../gateway/payment/supported.ts';
import { PaymentUnavailable } from '../../gateway/payment/unavailable.ts';
import { bazaarExtensionOf, describedInterface, type PublicInterface } from './bazaar.ts';
import type { DiscoveryResource } from './schema.ts';
import type { ReadTools, ToolSchemas } from './tool-schemas.ts';

/** A catalog entry: the resource without its base URL, and the lower-cased text a search matches. */
export type CatalogEntry = {
  path: string;
  resource: Omit<z.infer<typeof DiscoveryResource>, 'resource'>;
  text: string;
};

/** The filters both endpoints take (x402 specs/extensions/bazaar.md, "Optional Discovery Endpoints"). */
type CatalogFilter = {
  type?: string;
  payTo?: string;
  scheme?: string;
  network?: string;
  extensions?: string;
  /** Every word must appear in the entry's name, description or tool (case-insensitive). */
  query?: string;
};

/** The tools an MCP agent is listed by: those priced above 0 and those described (by its tenant or its upstream). */
function listedTools(agent: Agent, described: PublicInterface): string[] {
  const names = new Set([...Object.keys(agent.pricing?.tools ?? {}), ...Object.keys(described.tools ?? {})]);
  return [...names].filter((tool) => isCharged(priceOf({ agent, mcp: { method: 'tools/call', tool } }))).sort();
}

/** What an entry's terms are made with: the payment configuration and the tenant facilitator's kinds. */
type Terms = { config: PaymentConfig; kinds: readonly SupportedKind[] | null };

function entryOf(
  { config, kinds }: Terms,
  agent: Agent,
  described: PublicInterface,
  tool: string | null,
): CatalogEntry {
  const path = publicAgentUrls('', agent.id).stream;
  const mcp = tool === null ? null : { method: 'tools/call', tool };
  const entries = challengeEntries(config, priceOf({ agent, mcp })!, path, kinds);
  const [requirements] = entries;
  const description = agent.publicDescription ?? requirements.description;
  const toolDescription =
    tool && described.tools && Object.hasOwn(described.tools, tool) ? described.tools[tool].description : undefined;
  return {
    path,
    resource: {
      type: agent.protocol === 'mcp' ? ('mcp' as const) : ('http' as const),
      x402Version: 2,
      accepts: entries.map((entry) => requirementsV2(config, entry)),
      lastUpdated: agent.updatedAt.toISOString(),
      description: toolDescription ?? description,
      mimeType: agent.protocol === 'mcp' ? 'application/json' : undefined,
      ...(isValidServiceName(agent.name) ? { serviceName: agent.name } : {}),
      extensions: bazaarExtensionOf({ ...pick(agent), publicInterface: described }, tool),
    },
    text: [agent.name, agent.publicDescription ?? '', tool ?? '', toolDescription ?? ''].join('\n').toLowerCase(),
  };
}

const pick = ({ protocol, publicDescription }: Agent) => ({ protocol, publicDescription });

/** The payment side of the catalog: the configuration, and what a tenant facilitator's kinds are read with. */
export type CatalogPayment = { deps: PaymentDeps; gate: PaymentGate };

/**
 * The catalog entries of one public agent (none for an MCP agent with no priced or described
 * tool); null when its scheme's entry cannot be offered now (its facilitator's kinds unread).
 */
async function catalogEntriesOf(
  payment: CatalogPayment,
  agent: Agent,
  read: ReadTools | undefined,
): Promise<CatalogEntry[] | null> {
  const described = describedInterface(agent, read);
  const kinds = await facilitatorKinds(payment.deps, payment.gate, agent.tenantId, priceOf({ agent, mcp: null }));
  const terms = { config: payment.gate.config, kinds };
  try {
    if (agent.protocol !== 'mcp') return [entryOf(terms, agent, described, null)];
    return listedTools(agent, described).map((tool) => entryOf(terms, agent, described, tool));
  } catch (err) {
    if (err instanceof PaymentUnavailable) return null;
    throw err;
  }
}

function matches(entry: CatalogEntry, filter: CatalogFilter): boolean {
  const { resource } = entry;
  const terms = resource.accepts[0];
  if (filter.type !== undefined && resource.type !== filter.type) return false;
  if (filter.payTo !== undefined && terms.payTo.toLowerCase() !== filter.payTo.toLowerCase()) return false;
  if (filter.scheme !== undefined && terms.scheme !== filter.scheme) return false;
  if (filter.network !== undefined && terms.network !== filter.network) return false;
  if (filter.extensions !== undefined && !Object.hasOwn(resource.extensions ?? {}, filter.extensions)) return false;
  if (filter.query !== undefined) {
    const words = filter.query.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.every((word) => entry.text.includes(word))) return false;
  }
  return true;
}

type Built = { entries: CatalogEntry[]; complete: boolean };

export type Catalog = {
  /** The entries that pass the filter, in listing order (the agents' creation, then tool name). */
  find(filter: CatalogFilter): Promise<CatalogEntry[]>;
};

/**
 * The catalog of the public agents that can be called (gateway/discovery/public-agents.ts). At
 * most `maxAgents` agents, the oldest first (an operator bound on the memory and the rebuild a
 * write costs).
 */
export function createCatalog(
  db: GatewayDb,
  feed: ChangeFeed,
  payment: CatalogPayment,
  maxAgents: number,
  toolSchemas: ToolSchemas,
): Catalog {
  // `complete`: no agent was left out for want of its facilitator's kinds (else not kept).
  const cache = createFeedCache<Built>(feed, {
    keyOf: (key) => (key.startsWith('agent:') ? 'catalog' : null),
    max: 1,
    cacheable: (built) => built.complete,
  });
  let building: { generation: number; entries: Promise<Built> } | null = null;
  const build = async (): Promise<Built> => {
    const agents = await callablePublicAgents(db, maxAgents);
    const read = await toolSchemas.of(agents);
    const listed = await Promise.all(agents.map((agent) => catalogEntriesOf(payment, agent, read.get(agent.id))));
    return {
      entries: listed.flatMap((entries) => entries ?? []),
      complete: listed.every((entries) => entries !== null),
    };
  };
  // Concurrent misses share one read begun since the last change; a read a write overtook is
  // neither joined nor kept (feed-cache.ts). Only while the feed is live: a replica that lost
  // its lease does not see the writes its generation would count, so each of its calls reads
  // the database itself (a shared read may have begun before a write its caller saw answered).
  const load = () => {
    const generation = feed.generation();
    if (!feed.live()) return build();
    if (building?.generation !== generation) {
      const entries = build();
      const current = { generation, entries };
      building = current;
      void entries
        .finally(() => {
          if (building === current) building = null;
        })
        .catch(() => undefined);
    }
    return building!.entries;
  };
  return {
    async find(filter) {
      const { entries } = await cache.get('catalog', load);
      return entries.filter((entry) => matches(entry, filter));
    },
  };
}
