// What a member call of a virtual MCP server costs. The requests the server makes of a member on
// its own account (opening the member's session, reading the lists it federates) are not the
// client's calls of that member: they are free, as the gateway's own reading of an agent's tools
// for the catalog is, so a member with a flat price can be federated at all. What the client
// routes to a member (tools/call, prompts/get, resources/read) costs what a direct call costs.
import type { Price } from '../payment/pricing.ts';

/** The MCP methods a virtual server sends a member on its own account. */
const SERVER_OWN_METHODS: ReadonlySet<string> = new Set([
  'initialize',
  'notifications/initialized',
  'tools/list',
  'prompts/list',
  'resources/list',
  'resources/templates/list',
]);

/** The price of a member call that came through a virtual server: nothing for the server's own requests. */
export function memberCallPrice(price: Price | null, method: string | null): Price | null {
  if (!price || method === null || !SERVER_OWN_METHODS.has(method)) return price;
  return { ...price, amount: '0' };
}
