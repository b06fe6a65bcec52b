// Policy stage (between parse and payment): the tenant's policy decides allow, warn or deny
// before anyone is asked to pay. A tenant with no policy passes unchanged. When the policy
// store cannot be read the stage throws, and the call is a 500 whatever on_error says
// (fail closed): without the store we cannot know the policy, only the engine's own
// failures are on_error's to decide.
import type { ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../app.ts';
import { createPolicyEngine, type PolicyEngine } from './engine.ts';

export type PolicyOutcome = { action: 'allow' | 'warn' | 'deny'; reason: string };

// One engine (cache, rate window) per app instance; the deps object is the app's identity.
const engines = new WeakMap<AppDeps, PolicyEngine>();

export function policyEngineFor(deps: AppDeps): PolicyEngine {
  let engine = engines.get(deps);
  if (!engine) engines.set(deps, (engine = createPolicyEngine({ orm: deps.orm, redisUrl: deps.config.redisUrl, log: deps.log })));
  return engine;
}

export async function policyStage(deps: AppDeps, call: ProxyCall): Promise<PolicyOutcome> {
  const verdict = await policyEngineFor(deps).decide({
    tenantId: call.caller.tenantId,
    userId: call.caller.userId,
    agentId: call.agent.id,
    protocol: call.agent.protocol,
    tool: call.mcp?.tool ?? null,
    bodyBytes: call.bodyBytes,
  });
  if (!verdict) return { action: 'allow', reason: 'no policy' };
  return { action: verdict.action, reason: verdict.reason };
}
