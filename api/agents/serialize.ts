// The Agent as the API shows it (docs/API.md "Agents", and the fields docs/CATALOG.md adds).
import { getAddress } from 'ethers';
import type { z } from 'zod';
import type { Agent } from '../../gateway/db/entities.ts';
import { ownBurst } from '../../gateway/ratelimit/index.ts';
import type { AgentView } from './view.ts';
import type { PublicInterfaceInput } from './public-interface.ts';
import { skillsOf } from '../../gateway/a2a/card.ts';
import { agentStatus } from '../../gateway/agents/status.ts';

/** Where the gateway serves an A2A agent's card (api/proxy/a2a-card.ts) and takes its JSON-RPC calls. */
export function a2aAgentUrls(base: string, agentId: string): { card: string; rpc: string } {
  const agent = `${base}/v1/proxy/${agentId}`;
  return { card: `${agent}/.well-known/agent-card.json`, rpc: `${agent}/stream` };
}

/** Where a public agent is served, outside /v1 (api/routes/public.ts). */
export function publicAgentUrls(base: string, agentId: string): { transactional: string; stream: string } {
  const transactional = `${base}/public/agents/${agentId}`;
  return { transactional, stream: `${transactional}/stream` };
}

/** `base`: the public base URL (api/public-url.ts publicBaseUrl), for the agent's public URLs. */
export function serializeAgent(agent: Agent, base: string): z.infer<typeof AgentView> {
  const open = agent.public && !agent.deletedAt ? publicAgentUrls(base, agent.id) : null;
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
    mcp_transport: (agent.mcpTransport as 'streamable_http' | null) ?? null,
    mcp_protocol_version: agent.mcpProtocolVersion ?? null,
    pricing: agent.pricing ? { ...agent.pricing, pay_to: getAddress(agent.pricing.pay_to.toLowerCase()) } : null,
    status: agentStatus(agent),
    created_by: agent.createdBy,
    // double precision may come back from the driver as a string.
    rate_limit_rps: agent.rateLimitRps == null ? null : Number(agent.rateLimitRps),
    rate_limit_burst: ownBurst(agent),
    retry_non_idempotent: agent.retryNonIdempotent,
    suspended: agent.suspended,
    suspended_reason: agent.suspendedReason ?? null,
    a2a_pass_unknown_methods: agent.a2aPassUnknownMethods ?? false,
    a2a_skills: agent.protocol === 'a2a' && agent.a2aCard ? skillsOf(agent.a2aCard) : null,
    a2a_card_url: agent.protocol === 'a2a' ? a2aAgentUrls(base, agent.id).card : null,
    public: agent.public,
    public_description: agent.publicDescription ?? null,
    // Stored only through PublicInterfaceInput (routes/agents.ts).
    public_interface: (agent.publicInterface as PublicInterfaceInput | null) ?? null,
    public_url: open?.transactional ?? null,
    public_stream_url: open?.stream ?? null,
    created_at: agent.createdAt.toISOString(),
    updated_at: agent.updatedAt.toISOString(),
  };
}
