// The /v1 door: the caller is the bearer token's (authenticated before the call is routed), the
// agent must be in its tenant (404) and invocable (422), and the call takes a token from the
// agent's, the tenant's and the global buckets (429). A virtual MCP server's member call is
// marked as such (api/mcp-servers/via.ts).
import { bucketsFor } from '../../gateway/ratelimit/index.ts';
import { unprocessable } from '../errors.ts';
import { admitAgent } from './stages/agent.ts';
import { takeTokens } from './stages/rate-limit.ts';
import type { Door } from './door.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import { openVia, VIA_HEADER } from '../mcp-servers/via.ts';
import { memberCallPrice } from '../../gateway/mcp-servers/pricing.ts';

export function tokenDoor(deps: AppDeps, parts: Pick<ProxyParts, 'agents' | 'limiter'>): Door {
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
      const giveBack = await takeTokens(parts.limiter, bucketsFor(admitted.agent, deps.config.rateLimit));
      // A member call of a virtual MCP server (api/mcp-servers/via.ts): recorded as through it,
      // its payment refusals answered as the x402 MCP transport's tool result, and the server's
      // own requests (the member's session, its lists) free (gateway/mcp-servers/pricing.ts).
      const via = ctx.get(VIA_HEADER);
      const serverId = via ? openVia(via, caller.tenantId) : null;
      if (!serverId) return { ...admitted, caller, giveBack };
      return {
        ...admitted,
        caller,
        giveBack,
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
