// Policy stage (between parse and payment): the tenant's policy decides allow, warn or deny
// before anyone is asked to pay. A tenant with no policy passes unchanged. When the policy
// store cannot be read the stage throws, and the call is a 500 whatever on_error says
// (fail closed): without the store we cannot know the policy, only the engine's own
// failures are on_error's to decide.
import type { ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../deps.ts';
import { createPolicyEngine, type PolicyEngine } from '../../gateway/policy/engine.ts';
import type { DecisionRecord } from '../../gateway/policy/store.ts';

export type PolicyOutcome = { action: 'allow' | 'warn' | 'deny'; reason: string };

/** One engine (cache, rate window) per app, built at wiring time and shared by the proxy and the policy routes. */
export function createAppPolicyEngine(deps: AppDeps): PolicyEngine {
  return createPolicyEngine({ orm: deps.orm, feed: deps.feed, redisUrl: deps.config.redisUrl, log: deps.log });
}

export async function policyStage(engine: PolicyEngine, call: ProxyCall): Promise<PolicyOutcome> {
  // An admitted transactional call of an unpriced agent has its decision written in its accept
  // commit (gateway/invocations/accept.ts), beside the workflow start instead of one commit before it;
  // the decision is in the log before the 202 either way. A refusal, a streaming call and a
  // priced agent's call (a payment must not be taken before its decision is recorded) record
  // it here, before the call goes on.
  let deferred: DecisionRecord | null = null;
  const defer = call.mode === 'transactional' && !call.agent.pricing;
  const verdict = await engine.decide(
    {
      tenantId: call.caller.tenantId,
      userId: call.caller.userId,
      agentId: call.agent.id,
      protocol: call.agent.protocol,
      tool: call.mcp?.tool ?? null,
      method: call.a2a ? (call.a2a.method ?? call.a2a.sent) : (call.mcp?.method ?? null),
      skill: call.a2a?.skill ?? null,
      bodyBytes: call.bodyBytes,
      callerKind: call.caller.kind,
      invocationId: call.invocationId,
    },
    defer ? async (decision) => void (deferred = decision) : undefined,
  );
  if (!verdict) return { action: 'allow', reason: 'no policy' };
  if (deferred) {
    if (verdict.action === 'deny') await engine.store.recordDecision(deferred);
    else call.policyDecision = deferred;
  }
  return { action: verdict.action, reason: verdict.reason };
}
