// The Agent as the API shows it (SPEC "Agent" plus the filled gaps of the catalog issue).
import { getAddress } from 'ethers';
import type { Agent } from '../db/entities.ts';

export type AgentStatus = 'pending' | 'active' | 'inactive';

/** Status is derived, never stored: deleted → inactive; no upstream → pending; else active. */
export function agentStatus(agent: Agent): AgentStatus {
  if (agent.deletedAt) return 'inactive';
  return agent.upstreamUrl ? 'active' : 'pending';
}

export function serializeAgent(agent: Agent) {
  return {
    id: agent.id,
    tenant_id: agent.tenantId,
    name: agent.name,
    description: agent.description ?? null,
    tags: agent.tags,
    metadata: agent.metadata,
    upstream_url: agent.upstreamUrl ?? null,
    credential_ref: agent.credentialRef ?? null,
    emit_receipts: agent.emitReceipts,
    capture_body: agent.captureBody,
    protocol: agent.protocol,
    mcp_transport: agent.mcpTransport ?? null,
    mcp_protocol_version: agent.mcpProtocolVersion ?? null,
    pricing: agent.pricing ? { ...agent.pricing, pay_to: getAddress(agent.pricing.pay_to.toLowerCase()) } : null,
    status: agentStatus(agent),
    created_by: agent.createdBy,
    rate_limit_rps: agent.rateLimitRps ?? null,
    rate_limit_burst: agent.rateLimitBurst ?? (agent.rateLimitRps ? 20 : null),
    retry_non_idempotent: agent.retryNonIdempotent,
    suspended: agent.suspended,
    suspended_reason: agent.suspendedReason ?? null,
    created_at: agent.createdAt.toISOString(),
    updated_at: agent.updatedAt.toISOString(),
  };
}
