// A virtual MCP server reaches its members through this process's own /v1/proxy/{id}/stream
// (api/mcp-servers/members.ts), so every member call is admitted as a direct one is. What only
// it may say there, that the call comes through a server (recorded on the invocation, and its
// payment refusals answered as the x402 MCP transport's tool result), travels in one header
// sealed with a key this process drew at start: a caller cannot forge it, and the upstream never
// sees it (x-gateway-* headers are not forwarded).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const VIA_HEADER = 'x-gateway-mcp-server';

const key = randomBytes(32);

const mac = (tenantId: string, serverId: string) =>
  createHmac('sha256', key).update(`${tenantId}\n${serverId}`).digest('base64url');

/** The header's value for a member call of this tenant's server. */
export function sealVia(tenantId: string, serverId: string): string {
  return `${serverId}.${mac(tenantId, serverId)}`;
}

/** The server a member call came through, when the header is one this process sealed for the tenant. */
export function openVia(value: string, tenantId: string): string | null {
  const dot = value.indexOf('.');
  if (dot < 0) return null;
  const serverId = value.slice(0, dot);
  const given = Buffer.from(value.slice(dot + 1));
  const expected = Buffer.from(mac(tenantId, serverId));
  return given.length === expected.length && timingSafeEqual(given, expected) ? serverId : null;
}
