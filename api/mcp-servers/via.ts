// A virtual MCP server reaches its members through this process's own /v1/proxy/{id}/stream
// (api/mcp-servers/members.ts), so every member call is admitted as a direct one is. What only
// it may say there, that the call comes through a server (recorded on the invocation, and its
// payment refusals answered as the x402 MCP transport's tool result), travels in one header
// sealed with a key this process drew at start: a caller cannot forge it, and the upstream never
// sees it (x-gateway-* headers are not forwarded).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';

export const VIA_HEADER = 'x-gateway-mcp-server';

const key = randomBytes(32);

// Each server's mark is computed once per process, when it is first sealed: an HMAC costs
// about 60 µs (the key's preparation included), and a member call needed two (sealed, then
// opened; a CPU profile of bench/mcp-federation.ts). A mark opened is looked up, never added:
// headers a caller makes up cannot push the real marks out.
const sealed = new LRUCache<string, string>({ max: 10_000 });

function mac(tenantId: string, serverId: string, remember: boolean): string {
  const input = `${tenantId}\n${serverId}`;
  let value = sealed.get(input);
  if (value === undefined) {
    value = createHmac('sha256', key).update(input).digest('base64url');
    if (remember) sealed.set(input, value);
  }
  return value;
}

/** The header's value for a member call of this tenant's server. */
export function sealVia(tenantId: string, serverId: string): string {
  return `${serverId}.${mac(tenantId, serverId, true)}`;
}

/** The server a member call came through, when the header is one this process sealed for the tenant. */
export function openVia(value: string, tenantId: string): string | null {
  const dot = value.indexOf('.');
  if (dot < 0) return null;
  const serverId = value.slice(0, dot);
  const given = Buffer.from(value.slice(dot + 1));
  const expected = Buffer.from(mac(tenantId, serverId, false));
  return given.length === expected.length && timingSafeEqual(given, expected) ? serverId : null;
}
