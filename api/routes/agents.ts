// /v1/agents: the tenant's catalog.
import Router from '@koa/router';
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import { AgentSchema } from '../db/entities.ts';
import { newId, isId } from '../ids.ts';
import { badRequest, conflict, notFound } from '../errors.ts';
import { AgentCreateInput, crossFieldError, describeIssue } from '../agents/schema.ts';
import { serializeAgent } from '../agents/serialize.ts';
import type { AppDeps } from '../app.ts';
import type { AuthState } from '../auth.ts';

export function agentRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();

  router.post('/agents', async (ctx) => {
    const parsed = AgentCreateInput.safeParse(ctx.request.body);
    if (!parsed.success) throw badRequest(describeIssue(parsed.error));
    const input = parsed.data;
    const problem = crossFieldError(input, deps.config.upstream.allow);
    if (problem) throw badRequest(problem);
    const { tenantId, userId } = ctx.state.caller;
    const em = deps.orm.em.fork();
    const now = new Date();
    const agent = em.create(AgentSchema, {
      id: newId('agt'),
      tenantId,
      name: input.name,
      description: input.description ?? null,
      tags: input.tags ?? [],
      metadata: input.metadata ?? {},
      upstreamUrl: input.upstream_url ?? null,
      credentialRef: input.credential_ref ?? null,
      emitReceipts: input.emit_receipts ?? false,
      captureBody: input.capture_body ?? false,
      protocol: input.protocol ?? 'http',
      mcpTransport: input.mcp_transport ?? null,
      mcpProtocolVersion: input.mcp_protocol_version ?? null,
      pricing: input.pricing ?? null,
      rateLimitRps: input.rate_limit_rps ?? null,
      rateLimitBurst: input.rate_limit_burst ?? null,
      retryNonIdempotent: input.retry_non_idempotent ?? false,
      suspended: false,
      suspendedReason: null,
      deletedAt: null,
      createdBy: userId,
      createdAt: now,
      updatedAt: now,
    });
    try {
      await em.flush();
    } catch (err) {
      if (err instanceof UniqueConstraintViolationException) throw conflict('an agent with this name already exists');
      throw err;
    }
    ctx.status = 201;
    ctx.body = serializeAgent(agent);
  });

  router.get('/agents/:id', async (ctx) => {
    if (!isId('agt', ctx.params.id)) throw notFound();
    const agent = await deps.orm.em.fork().findOne(AgentSchema, { id: ctx.params.id, tenantId: ctx.state.caller.tenantId });
    if (!agent) throw notFound();
    ctx.body = serializeAgent(agent);
  });

  return router;
}
