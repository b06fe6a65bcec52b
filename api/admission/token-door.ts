// The /v1 door: the caller is the bearer token's (authenticated before the call is routed), the
// agent must be in its tenant (404) and invocable (422), and the call takes a token from the
// agent's, the tenant's and the global buckets (429). A virtual MCP server's member call is
// marked as such (api/mcp-servers/via.ts).
// An HTTP agent's call whose tenant has no payer-scoped budget has every fact its budgets match
// on here (its agent, its caller, its price: the agent's own, whatever the body), so its budget
// reservation rides the rate limit's step (gateway/budgets/gate.ts takeAndAdmit: one Redis
// round trip for both); the verdict waits for the budget stage, in the contract's order
// (stages/budget.ts), and a call refused before it gives the reservation back (admit.ts).
import { bucketsFor } from '../../gateway/ratelimit/index.ts';
import { unprocessable } from '../errors.ts';
import { admitAgent } from './stages/agent.ts';
import { takeTokens, tokensTaken } from './stages/rate-limit.ts';
import { newId } from '../../lib/ids.ts';
import { isCharged, priceOf } from '../../gateway/payment/pricing.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import type { Caller } from '../auth.ts';
import type { Admitted } from './door.ts';
import type { Door } from './door.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import { openVia, VIA_HEADER } from '../mcp-servers/via.ts';
import { memberCallPrice } from '../../gateway/mcp-servers/pricing.ts';

type DoorParts = Pick<ProxyParts, 'agents' | 'limiter' | 'budgets'>;

/** The rate limit's step, with the call's budget reservation when its door knows all it needs. */
async function takeAtDoor(
  deps: AppDeps,
  parts: DoorParts,
  agent: Agent,
  caller: Caller,
): Promise<Pick<Admitted, 'giveBack' | 'invocationId' | 'budget'>> {
  const buckets = bucketsFor(agent, deps.config.rateLimit);
  // An MCP or A2A call's price is its tool's or method's, known once its body is parsed.
  if (agent.protocol !== 'http') return { giveBack: await takeTokens(parts.limiter, buckets) };
  const price = priceOf({ agent, mcp: null, a2a: null });
  const amount = isCharged(price) ? BigInt(price.amount) : 0n;
  const invocationId = newId('inv');
  const { decision, budget } = await parts.budgets.gate.takeAndAdmit(
    { tenantId: caller.tenantId, invocationId, agentId: agent.id, user: caller.userId, payer: null, amount },
    { limiter: parts.limiter, buckets },
  );
  const giveBack = tokensTaken(parts.limiter, buckets, decision);
  return budget ? { giveBack, invocationId, budget: { verdict: budget, amount } } : { giveBack, invocationId };
}

export function tokenDoor(deps: AppDeps, parts: DoorParts): Door {
  return {
    issuesPollKeys: false,
    async admit(ctx) {
      const caller = ctx.state.caller!;
      const admitted = await admitAgent(
        ctx,
        deps,
        (id) => parts.agents.load(caller.tenantId, id),
        () => unprocessable('agent is not invocable'),
      );
      const taken = await takeAtDoor(deps, parts, admitted.agent, caller);
      // A member call of a virtual MCP server (api/mcp-servers/via.ts): recorded as through it,
      // its payment refusals answered as the x402 MCP transport's tool result, and the server's
      // own requests (the member's session, its lists) free (gateway/mcp-servers/pricing.ts).
      const via = ctx.get(VIA_HEADER);
      const serverId = via ? openVia(via, caller.tenantId) : null;
      if (!serverId) return { ...admitted, caller, ...taken };
      return {
        ...admitted,
        caller,
        ...taken,
        async identify(call) {
          call.mcpServerId = serverId;
          if (call.agent.protocol !== 'mcp') return;
          call.paymentAnswer = 'mcp';
          call.price = memberCallPrice(call.price, call.mcp?.method ?? null);
        },
      };
    },
  };
}
