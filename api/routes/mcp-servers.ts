// /v1/mcp-servers: the tenant's virtual MCP servers (gateway/mcp-servers/management.ts holds the
// rules that need the database; this maps the bodies to them). The MCP endpoint of each is
// api/mcp-servers/endpoint.ts.
import Router from '@koa/router';
import { parseOr400, parseQuery } from '../validation.ts';
import { pageOf } from '../pagination.ts';
import { publicBaseUrl } from '../public-url.ts';
import {
  McpServerCreateInput,
  McpServerListQuery,
  McpServerUpdateInput,
  type McpServerCreateInput as CreateBody,
} from '../mcp-servers/schema.ts';
import { serializeMcpServer } from '../mcp-servers/serialize.ts';
import { createMcpServerManagement, type MemberInput } from '../../gateway/mcp-servers/management.ts';
import { mcpServerEndpoint } from '../mcp-servers/endpoint.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

const membersOf = (members: CreateBody['members']): MemberInput[] =>
  members.map((m) => ({ agentId: m.agent_id, prefix: m.prefix, tools: m.tools }));

export function mcpServerRoutes(deps: AppDeps, services: ProxyParts): Router<AuthState> {
  const router = new Router<AuthState>();
  const servers = createMcpServerManagement(deps.orm, deps.feed);
  const view = (ctx: Parameters<typeof publicBaseUrl>[0]) =>
    serializeMcpServer(publicBaseUrl(ctx, deps.config.publicAddress));

  router.post('/mcp-servers', async (ctx) => {
    const input = parseOr400(McpServerCreateInput, ctx.request.body);
    const { tenantId, userId } = ctx.state.caller;
    const row = await servers.create(tenantId, userId, {
      name: input.name,
      description: input.description ?? null,
      members: membersOf(input.members),
    });
    ctx.status = 201;
    ctx.body = view(ctx)(row);
  });

  router.get('/mcp-servers', async (ctx) => {
    const page = pageOf(parseQuery(McpServerListQuery, ctx.query), 'mcps');
    ctx.body = await servers.list(ctx.state.caller.tenantId, page, view(ctx));
  });

  router.get('/mcp-servers/:id', async (ctx) => {
    ctx.body = view(ctx)(await servers.get(ctx.state.caller.tenantId, ctx.params.id));
  });

  router.patch('/mcp-servers/:id', async (ctx) => {
    // The body is read once the server is found: a missing one is a 404 whatever it sent.
    const row = await servers.update(ctx.state.caller.tenantId, ctx.params.id, () => {
      const patch = parseOr400(McpServerUpdateInput, ctx.request.body);
      return {
        name: patch.name,
        description: patch.description,
        members: patch.members ? membersOf(patch.members) : undefined,
        touched: Object.keys(patch).length > 0,
      };
    });
    ctx.body = view(ctx)(row);
  });

  router.delete('/mcp-servers/:id', async (ctx) => {
    await servers.remove(ctx.state.caller.tenantId, ctx.params.id);
    ctx.status = 204;
  });

  // The server's MCP endpoint (streamable HTTP; GET is the session's stream of the server's own messages).
  const endpoint = mcpServerEndpoint(deps, services);
  router.post('/mcp-servers/:id/mcp', endpoint.post);
  router.get('/mcp-servers/:id/mcp', endpoint.stream);
  router.delete('/mcp-servers/:id/mcp', endpoint.remove);

  return router;
}
