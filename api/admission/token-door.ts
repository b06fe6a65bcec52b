// The /v1 door: the caller is the bearer token's (authenticated before the call is routed), the
// agent must be in its tenant (404) and invocable (422), and the call takes a token from the
// agent's, the tenant's and the global buckets (429).
import { bucketsFor } from '../../gateway/ratelimit/index.ts';
import { unprocessable } from '../errors.ts';
import { admitAgent } from './stages/agent.ts';
import { takeTokens } from './stages/rate-limit.ts';
import type { Door } from './door.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';

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
      return { ...admitted, caller, giveBack };
    },
  };
}
