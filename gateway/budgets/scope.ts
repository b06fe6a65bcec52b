// Which calls a budget counts: every populated field of its scope must match the call, as a
// policy's match does (gateway/policy/evaluate.ts); an empty scope counts every call of the
// tenant. `user` is the caller's subject (the token's `sub`; a public call's `x402:<payer>`),
// `payer` the address that pays the call (a public call's caller; a /v1 call's offered payment),
// compared without regard to case since addresses are written checksummed or not.

export type BudgetScope = { agent_id?: string; user?: string; payer?: string };

/** What a call is matched on. `payer` is null for a call that offers no payment. */
export type ScopeFacts = { agentId: string; user: string; payer: string | null };

export function scopeMatches(scope: BudgetScope, call: ScopeFacts): boolean {
  if (scope.agent_id !== undefined && scope.agent_id !== call.agentId) return false;
  if (scope.user !== undefined && scope.user !== call.user) return false;
  if (scope.payer !== undefined && (call.payer === null || scope.payer.toLowerCase() !== call.payer.toLowerCase()))
    return false;
  return true;
}

/** Whether the scope needs the payer of a call to be matched (only then is a /v1 call's payer read). */
export const needsPayer = (scope: BudgetScope) => scope.payer !== undefined;
