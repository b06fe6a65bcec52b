// A virtual MCP server as the API shows it, with the URL an MCP client connects to.
import type { z } from 'zod';
import type { McpServer } from '../../gateway/mcp-servers/entity.ts';
import type { McpServerView } from './schema.ts';

/** The server's MCP endpoint under the gateway's public base URL. */
function mcpUrlOf(base: string, id: string): string {
  return `${base}/v1/mcp-servers/${id}/mcp`;
}

export function serializeMcpServer(base: string) {
  return (row: McpServer): z.infer<typeof McpServerView> => ({
    id: row.id,
    tenant_id: row.tenantId,
    name: row.name,
    description: row.description ?? null,
    members: row.members.map((m) => ({ agent_id: m.agentId, prefix: m.prefix, tools: m.tools })),
    mcp_url: mcpUrlOf(base, row.id),
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
  });
}
