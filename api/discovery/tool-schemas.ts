// The tool descriptions a public MCP agent's upstream gives in its own `tools/list`
// (gateway/mcp/tools-list.ts, read with the MCP SDK's client), for the tools its tenant did not describe in public_interface:
// read when the catalog is built, kept per agent version (its id, upstream, credential and last
// change) in a bounded cache, so a rebuild does not read the upstream again. Each tool is held to
// the rules of a tenant's own description (api/agents/public-interface.ts: a JSON Schema,
// bounded, nothing shaped like a credential); a tool that breaks them is left out, and a failed
// read gives nothing (the catalog then shows what the tenant described), tried again after a minute.
import { LRUCache } from 'lru-cache';
import pLimit from 'p-limit';
import type { Dispatcher } from 'undici';
import type { Agent } from '../../gateway/db/entities.ts';
import type { CredentialResolver } from '../../gateway/credentials/resolver.ts';
import { fetchToolsList, type ListedTool } from '../../gateway/mcp/tools-list.ts';
import { PublicInterfaceInput } from '../agents/public-interface.ts';

/** A tool as the catalog shows it: what public_interface.tools holds for one tool. */
type ToolDescription = { description?: string; input_schema?: Record<string, unknown> };
export type ReadTools = Record<string, ToolDescription>;

/** Agents kept (a few KiB each at most: the validated descriptions only). */
const MAX_AGENTS = 1_000;
const READ_TTL_MS = 10 * 60_000;
const FAILED_TTL_MS = 60_000;
/** Upstreams read at once while a catalog is built. */
const READS_AT_ONCE = 8;
const MAX_TOOLS = 100;

/** The listed tool as a tenant's description would be, or null when such a description would be refused. */
function validated(tool: ListedTool): ToolDescription | null {
  const described: ToolDescription = {};
  if (typeof tool.description === 'string') described.description = tool.description;
  if (tool.inputSchema && typeof tool.inputSchema === 'object' && !Array.isArray(tool.inputSchema))
    described.input_schema = tool.inputSchema as Record<string, unknown>;
  const checked = PublicInterfaceInput.safeParse({ tools: { [tool.name]: described } });
  return checked.success ? described : null;
}

export type ToolSchemas = {
  /** The upstream's validated tools of each agent given (an MCP agent over streamable HTTP), by agent id. */
  of(agents: Agent[]): Promise<Map<string, ReadTools>>;
};

/** The agent version a read belongs to: a change of the agent (its upstream, credential, anything) reads again. */
type AgentVersion = Pick<Agent, 'id' | 'upstreamUrl' | 'credentialRef' | 'updatedAt'>;
const keyOf = (agent: AgentVersion) =>
  [agent.id, agent.upstreamUrl, agent.credentialRef ?? '', agent.updatedAt.getTime()].join('\n');

// One per process: a read is the upstream's answer for one agent version, the same whichever
// catalog asked, and the challenges of that agent (bazaar.ts) show what the catalog showed.
const cache = new LRUCache<string, ReadTools>({ max: MAX_AGENTS, ttl: READ_TTL_MS });

/** The tools last read for this version of the agent, if a catalog build has read them. */
export function keptTools(agent: AgentVersion): ReadTools | undefined {
  return cache.get(keyOf(agent));
}

export function createToolSchemas(
  upstream: { dispatcher: Dispatcher },
  credentials: Pick<CredentialResolver, 'headersFor'>,
): ToolSchemas {
  const limit = pLimit(READS_AT_ONCE);

  // Reads in flight, by key: concurrent builds wait for the same read.
  const reading = new Map<string, Promise<ReadTools>>();
  const read = (agent: Agent): Promise<ReadTools> => {
    const key = keyOf(agent);
    const kept = cache.get(key);
    if (kept) return Promise.resolve(kept);
    let pending = reading.get(key);
    if (!pending) {
      pending = limit(() => readAndKeep(key, agent)).finally(() => reading.delete(key));
      reading.set(key, pending);
    }
    return pending;
  };
  const readAndKeep = async (key: string, agent: Agent): Promise<ReadTools> => {
    let tools: ReadTools = {};
    try {
      const headers = await credentials.headersFor(agent.tenantId, agent.credentialRef);
      const listed = await fetchToolsList(
        upstream.dispatcher,
        agent.upstreamUrl!,
        headers,
        agent.mcpProtocolVersion ?? null,
      );
      for (const tool of listed.slice(0, MAX_TOOLS)) {
        const described = validated(tool);
        if (described) tools[tool.name] = described;
      }
      cache.set(key, tools);
    } catch {
      tools = {};
      cache.set(key, tools, { ttl: FAILED_TTL_MS });
    }
    return tools;
  };

  return {
    async of(agents) {
      const readable = agents.filter(
        (agent) => agent.protocol === 'mcp' && agent.mcpTransport === 'streamable_http' && agent.upstreamUrl,
      );
      const tools = await Promise.all(readable.map(read));
      return new Map(readable.map((agent, i) => [agent.id, tools[i]]));
    },
  };
}
