// Policy stage (between parse and payment). Until the policy engine lands every call is
// allowed unchanged, which is also the SPEC's rule for a tenant with no policy.
import type { ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../app.ts';

export type PolicyOutcome = { action: 'allow' | 'warn' | 'deny'; reason: string };

export async function policyStage(_deps: AppDeps, _call: ProxyCall): Promise<PolicyOutcome> {
  return { action: 'allow', reason: 'no policy' };
}
