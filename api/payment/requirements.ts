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

function priceOf(pricing: Pricing, call: Pick<ProxyCall, 'mcp'>): string {
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  if (tool && pricing.tools && Object.hasOwn(pricing.tools, tool)) return pricing.tools[tool];
  return pricing.amount;
}

/** Whether this call is charged: a priced agent, and a price above 0 for it (a tool priced 0 is free). */
export function isChargeable(call: Pick<ProxyCall, 'agent' | 'mcp'>): boolean {
  return !!call.agent.pricing && BigInt(priceOf(call.agent.pricing, call)) !== 0n;
}

export function requirementsFor(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'resourceUrl'>,
): ChallengeEntry {
  const pricing = call.agent.pricing!;
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  return {
    scheme: 'exact',
    network: config.network,
    maxAmountRequired: priceOf(pricing, call),
    resource: call.resourceUrl,
    description: tool ? `Call of tool ${tool} on agent ${call.agent.name}` : `Call of agent ${call.agent.name}`,
    mimeType: call.agent.protocol === 'mcp' ? 'application/json' : '',
    payTo: getAddress(pricing.pay_to),
    maxTimeoutSeconds: config.maxTimeoutSeconds,
    asset: config.domain.verifyingContract,
    extra: { name: config.domain.name, version: config.domain.version },
  };
}

export function challengeFor(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'resourceUrl'>,
  error: string,
): Challenge {
  return { x402Version: 1, error, accepts: [requirementsFor(config, call)] };
}
