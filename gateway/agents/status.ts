// An agent's status and whether it may be invoked: the domain's rule, read by the admission's
// agent stage (api/admission/stages/agent.ts) and by the answer that shows an agent
// (api/agents/serialize.ts), so the two never disagree.
import type { Agent } from '../db/entities.ts';

export type AgentStatus = 'pending' | 'active' | 'inactive';

/** Status is derived, never stored: deleted → inactive; no upstream → pending; else active. */
export function agentStatus(agent: Agent): AgentStatus {
  if (agent.deletedAt) return 'inactive';
  return agent.upstreamUrl ? 'active' : 'pending';
}

/** A call may be made to it: active (an upstream, not deleted) and not suspended. */
export function isInvocable(agent: Agent): boolean {
  return agentStatus(agent) === 'active' && !agent.suspended;
}
