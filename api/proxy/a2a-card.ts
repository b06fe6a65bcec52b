// GET /v1/proxy/{id}/.well-known/agent-card.json: an A2A agent's card as callers of the gateway
// see it (gateway/a2a/card.ts servedCard): the upstream's card as last read, its interfaces at
// the gateway's JSON-RPC endpoint for the agent (the streaming endpoint, which answers unary
// methods with the upstream's own JSON-RPC response and streaming ones as SSE), the gateway's
// bearer scheme, nothing of the upstream's address or credentials. An A2A client given
// `{base}/v1/proxy/{id}` as the agent's URL finds it where it looks by default.
import type { Context } from 'koa';
import { notFound } from '../errors.ts';
import { isId } from '../../lib/ids.ts';
import { servedCard } from '../../gateway/a2a/card.ts';
import { a2aAgentUrls } from '../agents/serialize.ts';
import { publicBaseUrl } from '../public-url.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';
import type { ProxyParts } from './pipeline-parts.ts';

export function a2aCardRoute(deps: AppDeps, services: Pick<ProxyParts, 'agents'>) {
  return async function a2aCard(ctx: Context & { state: AuthState; params: Record<string, string> }): Promise<void> {
    if (!isId('agt', ctx.params.id)) throw notFound();
    const agent = await services.agents.load(ctx.state.caller.tenantId, ctx.params.id);
    // Not an A2A agent, deleted, or without a card yet (no upstream_url): there is no card to serve.
    if (!agent || agent.deletedAt || agent.protocol !== 'a2a' || !agent.a2aCard || !agent.upstreamUrl) throw notFound();
    const { rpc } = a2aAgentUrls(publicBaseUrl(ctx, deps.config.publicAddress), agent.id);
    ctx.set('Cache-Control', 'private, no-cache');
    ctx.body = servedCard(agent.a2aCard, agent.upstreamUrl, rpc, { kind: 'bearer' });
  };
}
