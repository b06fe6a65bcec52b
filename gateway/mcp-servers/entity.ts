// The `mcp_servers` and `mcp_server_sessions` tables (Migration20261206120000_mcp_servers): a
// virtual MCP server of a tenant, its members read whole with it, and the sessions clients hold
// with it (each naming the member sessions opened for it, by agent id).
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

/** One member: an MCP agent of the tenant, the prefix of its tools' names, its allow-list (null: every tool). */
export type McpServerMember = { agentId: string; prefix: string; tools: string[] | null };

export const McpServerSchema = defineEntity({
  name: 'McpServer',
  tableName: 'mcp_servers',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    name: p.string(),
    description: p.string().nullable(),
    members: p.json<McpServerMember[]>(),
    createdBy: p.string(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
export type McpServer = InferEntity<typeof McpServerSchema>;

export const McpServerSessionSchema = defineEntity({
  name: 'McpServerSession',
  tableName: 'mcp_server_sessions',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    serverId: p.string(),
    /** The user claim of the token that opened it: no other caller continues it. */
    caller: p.string(),
    /** Member agent id → the member's own Mcp-Session-Id. */
    memberSessions: p.json<Record<string, string>>(),
    createdAt: p.datetime(),
    usedAt: p.datetime(),
  },
});
export type McpServerSession = InferEntity<typeof McpServerSessionSchema>;
