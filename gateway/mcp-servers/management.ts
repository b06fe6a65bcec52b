// The tenant's virtual MCP servers as the management API writes them (api/routes/mcp-servers.ts
// maps HTTP to these): the rules that need the database are here. Each member names an MCP
// agent of the tenant that is not deleted; its prefix defaults to the agent's name made a valid
// tool-name prefix and is unique within the server; the server's name is unique in the tenant.
import { LockMode } from '@mikro-orm/core';
import { newId, isId } from '../../lib/ids.ts';
import type { GatewayDb } from '../db/orm.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { AgentSchema } from '../db/entities.ts';
import { listPage, ownedRow, type Page } from '../db/pages.ts';
import { absent, flushOrConflict, invalid } from '../refusal.ts';
import { McpServerSchema, type McpServer, type McpServerMember } from './entity.ts';
import { defaultPrefix } from './names.ts';

const NAME_TAKEN = 'an MCP server with this name already exists';

/** A member as the tenant sends it: the prefix may be left to its default. */
export type MemberInput = { agentId: string; prefix?: string; tools?: string[] };

export type NewMcpServer = { name: string; description: string | null; members: MemberInput[] };

export type McpServerPatch = {
  name?: string;
  description?: string | null;
  members?: MemberInput[];
  touched: boolean;
};

/** The members as stored: every agent the tenant's MCP agent, every prefix set and unique. */
async function resolveMembers(
  em: ReturnType<GatewayDb['em']['fork']>,
  tenantId: string,
  members: MemberInput[],
): Promise<McpServerMember[]> {
  if (members.length === 0) throw invalid('members must not be empty');
  const ids = [...new Set(members.map((m) => m.agentId))];
  const agents = await em.find(AgentSchema, {
    id: { $in: ids.filter((id) => isId('agt', id)) },
    tenantId,
    deletedAt: null,
  });
  const byId = new Map(agents.map((a) => [a.id, a]));
  const resolved: McpServerMember[] = [];
  const prefixes = new Map<string, number>();
  for (const [index, member] of members.entries()) {
    const agent = byId.get(member.agentId);
    if (!agent) throw invalid(`members[${index}].agent_id names no agent of the tenant`);
    if (agent.protocol !== 'mcp') throw invalid(`members[${index}].agent_id names an agent that is not an MCP agent`);
    const prefix = member.prefix ?? defaultPrefix(agent.name);
    const taken = prefixes.get(prefix);
    if (taken !== undefined)
      throw invalid(`members[${index}].prefix ${JSON.stringify(prefix)} is already members[${taken}]'s`);
    prefixes.set(prefix, index);
    resolved.push({ agentId: agent.id, prefix, tools: member.tools ?? null });
  }
  return resolved;
}

/**
 * Built once per app. A change or removal is in force on every replica's cache (reads.ts)
 * before it resolves.
 */
export function createMcpServerManagement(db: GatewayDb, feed: ChangeFeed) {
  const published = async (id: string) => {
    feed.invalidate(`mcp-server:${id}`);
    await feed.publish();
  };
  return {
    async create(tenantId: string, createdBy: string, fields: NewMcpServer): Promise<McpServer> {
      const em = db.em.fork();
      const members = await resolveMembers(em, tenantId, fields.members);
      const now = new Date();
      const row = em.create(McpServerSchema, {
        id: newId('mcps'),
        tenantId,
        name: fields.name,
        description: fields.description,
        members,
        createdBy,
        createdAt: now,
        updatedAt: now,
      });
      await flushOrConflict(em, NAME_TAKEN);
      return row;
    },

    list<V>(tenantId: string, page: Page, view: (row: McpServer) => V) {
      return listPage(db, McpServerSchema, { tenantId }, page, view);
    },

    get(tenantId: string, id: string): Promise<McpServer> {
      return ownedRow(db, McpServerSchema, 'mcps', id, tenantId);
    },

    /** Updates the server, row-locked; `patchOf` (which may refuse) reads the body once it is found. */
    async update(tenantId: string, id: string, patchOf: () => McpServerPatch): Promise<McpServer> {
      if (!isId('mcps', id)) throw absent();
      const updated = await db.em.fork().transactional(async (em) => {
        const current = await em.findOne(McpServerSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
        if (!current) throw absent();
        const patch = patchOf();
        if (patch.members !== undefined) current.members = await resolveMembers(em, tenantId, patch.members);
        if (patch.name !== undefined) current.name = patch.name;
        if (patch.description !== undefined) current.description = patch.description;
        if (patch.touched) current.updatedAt = new Date();
        await flushOrConflict(em, NAME_TAKEN);
        return current;
      });
      await published(id);
      return updated;
    },

    async remove(tenantId: string, id: string): Promise<void> {
      if (!isId('mcps', id)) throw absent();
      const em = db.em.fork();
      const removed = await em.nativeDelete(McpServerSchema, { id, tenantId });
      if (removed === 0) throw absent();
      await published(id);
    },
  };
}
