// What a call costs and the x402 v1 challenge that says so. The price is the agent's flat
// price, or for an MCP `tools/call` the tool's own price when pricing.tools names it. Each
// `accepts` entry carries what unmodified x402 v1 clients (x402-fetch, x402-axios) insist on:
// an absolute `resource` URL, `description` and `mimeType` strings, and `extra` with the
// token's EIP-712 name and version; `outputSchema` is left out rather than null.
import { getAddress } from 'ethers';
import type { Pricing } from '../../gateway/db/entities.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { Challenge, ChallengeEntry } from '../../x402/schemas.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';

function priceOf(pricing: Pricing, call: Pick<ProxyCall, 'mcp' | 'a2a'>): string {
  if (call.a2a) return a2aPriceOf(pricing, call.a2a);
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  if (tool && pricing.tools && Object.hasOwn(pricing.tools, tool)) return pricing.tools[tool];
  return pricing.amount;
}

/**
 * An A2A call: the price of the skill its message names, else of its method, else the flat
 * price; a method the gateway does not know (passed only when the agent allows it) is free.
 */
function a2aPriceOf(pricing: Pricing, a2a: NonNullable<ProxyCall['a2a']>): string {
  if (a2a.skill && pricing.skills && Object.hasOwn(pricing.skills, a2a.skill)) return pricing.skills[a2a.skill];
  if (!a2a.method) return '0';
  if (pricing.methods && Object.hasOwn(pricing.methods, a2a.method)) return pricing.methods[a2a.method];
  return pricing.amount;
}

function describe(call: Pick<ProxyCall, 'agent' | 'mcp' | 'a2a'>): string {
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  if (tool) return `Call of tool ${tool} on agent ${call.agent.name}`;
  if (call.a2a?.method)
    return `A2A ${call.a2a.method}${call.a2a.skill ? ` (skill ${call.a2a.skill})` : ''} on agent ${call.agent.name}`;
  return `Call of agent ${call.agent.name}`;
}

/** Whether this call is charged: a priced agent, and a price above 0 for it (a tool priced 0 is free). */
export function isChargeable(call: Pick<ProxyCall, 'agent' | 'mcp' | 'a2a'>): boolean {
  return !!call.agent.pricing && BigInt(priceOf(call.agent.pricing, call)) !== 0n;
}

export function requirementsFor(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'a2a' | 'resourceUrl'>,
): ChallengeEntry {
  const pricing = call.agent.pricing!;
  return {
    scheme: 'exact',
    network: config.network,
    maxAmountRequired: priceOf(pricing, call),
    resource: call.resourceUrl,
    description: describe(call),
    mimeType: call.agent.protocol === 'http' ? '' : 'application/json',
    payTo: getAddress(pricing.pay_to),
    maxTimeoutSeconds: config.maxTimeoutSeconds,
    asset: config.domain.verifyingContract,
    extra: { name: config.domain.name, version: config.domain.version },
  };
}

export function challengeFor(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'a2a' | 'resourceUrl'>,
  error: string,
): Challenge {
  return { x402Version: 1, error, accepts: [requirementsFor(config, call)] };
}
