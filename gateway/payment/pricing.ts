// What a call costs. The price is the agent's flat price; for an MCP `tools/call`, the tool's own
// price when pricing.tools names it; for an A2A call, the skill's its message names, else its
// method's, else the flat price (a method the gateway does not know is free). Computed once per
// call, when its facts are known, and handed to every stage after (api/proxy/call.ts `price`);
// the challenge entries a price is offered in are the schemes' (gateway/payment/schemes/). The
// price names the scheme it is paid by: the agent's `pricing.scheme`, else `exact`.
import { EXACT } from '../../x402/schemes/exact/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { DEFAULT_WITHDRAW_DELAY } from './channel-terms.ts';
import type { PricingScheme } from '../metering/meter.ts';
import type { Agent, Pricing } from '../db/entities.ts';

/** The facts of a call its price depends on. */
export type PricedCall = {
  agent: Pick<Agent, 'name' | 'protocol' | 'pricing'>;
  mcp: { method: string; tool: string | null } | null;
  a2a?: { method: string | null; skill: string | null } | null;
};

/** What a call costs, to whom, and what for: the terms every scheme's challenge entry states. */
export type Price = {
  /** The scheme the call is paid by: its challenge entry is that scheme's (schemes/index.ts). */
  scheme: PricingScheme;
  /**
   * Base units of the token, a decimal string; '0' for a call priced at nothing (a free tool).
   * `exact`: what the call costs; `upto`: the maximum the payer authorizes (the meter then
   * measures the charge, at most this); `batch-settlement`: the most the call's voucher adds.
   */
  amount: string;
  /** The agent's pay-to address, as configured. */
  payTo: string;
  description: string;
  /** The answer's media type: '' for an http agent, JSON for a JSON-RPC one. */
  mimeType: string;
  /**
   * `batch-settlement` only (./channel-terms.ts): the least a payer deposits into its channel
   * (`extra.minDeposit`), a decimal string; absent when the agent names none.
   */
  minDeposit?: string;
  /** `batch-settlement` only: the channel's withdrawal delay in seconds (the agent's, stored with its default). */
  withdrawDelay?: number;
};

function amountOf(pricing: Pricing, call: PricedCall): string {
  if (call.a2a) return a2aAmountOf(pricing, call.a2a);
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  if (tool && pricing.tools && Object.hasOwn(pricing.tools, tool)) return pricing.tools[tool];
  return pricing.amount;
}

function a2aAmountOf(pricing: Pricing, a2a: NonNullable<PricedCall['a2a']>): string {
  if (a2a.skill && pricing.skills && Object.hasOwn(pricing.skills, a2a.skill)) return pricing.skills[a2a.skill];
  if (!a2a.method) return '0';
  if (pricing.methods && Object.hasOwn(pricing.methods, a2a.method)) return pricing.methods[a2a.method];
  return pricing.amount;
}

function describe(call: PricedCall): string {
  const tool = call.mcp?.method === 'tools/call' ? call.mcp.tool : null;
  if (tool) return `Call of tool ${tool} on agent ${call.agent.name}`;
  if (call.a2a?.method)
    return `A2A ${call.a2a.method}${call.a2a.skill ? ` (skill ${call.a2a.skill})` : ''} on agent ${call.agent.name}`;
  return `Call of agent ${call.agent.name}`;
}

/** What this call costs; null when its agent is not priced (a priced one may still cost '0'). */
export function priceOf(call: PricedCall): Price | null {
  const { pricing } = call.agent;
  if (!pricing) return null;
  return {
    scheme: pricing.scheme ?? EXACT,
    amount: amountOf(pricing, call),
    payTo: pricing.pay_to,
    description: describe(call),
    mimeType: call.agent.protocol === 'http' ? '' : 'application/json',
    ...channelTermsOf(pricing),
  };
}

/** A channel-priced agent's channel terms, as the price carries them (no keys for another scheme). */
function channelTermsOf(pricing: Pricing): Pick<Price, 'minDeposit' | 'withdrawDelay'> {
  if (pricing.scheme !== SCHEME_BATCH_SETTLEMENT) return {};
  return {
    ...(pricing.min_deposit === undefined ? {} : { minDeposit: pricing.min_deposit }),
    withdrawDelay: pricing.withdraw_delay ?? DEFAULT_WITHDRAW_DELAY,
  };
}

/** Whether a call at this price is charged: priced, and above 0 (a tool priced 0 is free). */
export function isCharged(price: Price | null): price is Price {
  return !!price && BigInt(price.amount) !== 0n;
}
