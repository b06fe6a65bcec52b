// The proxy endpoints. One transactional call: agent in tenant (404) → invocable (422) →
// model header (400) → body within 32 MiB (413) → parse → policy stage → payment stage →
// claim-check the body → invocation row `pending` → InvocationWorkflow → 202.
import { createHash, randomUUID } from 'node:crypto';
import Router from '@koa/router';
import getRawBody from 'raw-body';
import { AgentSchema, BodySchema, InvocationSchema, type Agent } from '../db/entities.ts';
import { isId, newId } from '../ids.ts';
import { ApiError, badRequest, notFound, unprocessable } from '../errors.ts';
import { agentStatus } from '../agents/serialize.ts';
import { forwardableHeaders } from '../upstream/headers.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import { AgentId, InvocationStatus, TenantId } from '../../temporal/search-attributes.ts';
import { parseMcpBody } from '../proxy/parse.ts';
import type { ProxyCall } from '../proxy/call.ts';
import { policyStage } from '../policy/stage.ts';
import { paymentStage } from '../payment/stage.ts';
import type { AppDeps } from '../app.ts';
import type { AuthState } from '../auth.ts';

export const MAX_TRANSACTIONAL_BODY = 32 * 1024 * 1024;
const MAX_MODEL_BYTES = 256;

function assertInvocable(agent: Agent): void {
  if (agentStatus(agent) !== 'active' || agent.suspended) throw unprocessable('agent is not invocable');
}

export function proxyRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();

  router.post('/proxy/:id', async (ctx) => {
    const { tenantId, userId } = ctx.state.caller;
    if (!isId('agt', ctx.params.id)) throw notFound();
    const em = deps.orm.em.fork();
    const agent = await em.findOne(AgentSchema, { id: ctx.params.id, tenantId });
    if (!agent) throw notFound();
    assertInvocable(agent);

    const model = ctx.get('x-gateway-model') || null;
    if (model && Buffer.byteLength(model) > MAX_MODEL_BYTES) throw badRequest('X-Gateway-Model exceeds 256 bytes');
    const requestId = ctx.get('x-request-id') || randomUUID();
    ctx.set('X-Request-ID', requestId);

    // raw-body stops reading at the cap and raises a 413, without buffering past it.
    let body: Buffer;
    try {
      body = await getRawBody(ctx.req, { limit: MAX_TRANSACTIONAL_BODY });
    } catch (err) {
      if ((err as { status?: number }).status === 413) throw new ApiError(413, 'request body exceeds 32 MiB');
      throw badRequest('could not read request body');
    }

    const call: ProxyCall = {
      caller: ctx.state.caller,
      agent,
      mode: 'transactional',
      requestId,
      model,
      contentType: ctx.get('content-type') || null,
      bodyBytes: body.length,
      resourceUrl: `${ctx.protocol}://${ctx.host}${ctx.originalUrl}`,
      mcp: agent.protocol === 'mcp' ? parseMcpBody(body) : null,
      policyWarning: null,
      payment: null,
    };
    const policy = await policyStage(deps, call);
    if (policy.action === 'deny') throw new ApiError(403, 'denied by policy');
    if (policy.action === 'warn') call.policyWarning = policy.reason;
    call.payment = await paymentStage(deps, call, ctx.get('x-payment') || undefined);

    const now = new Date();
    const bodyId = newId('body');
    const invocationId = newId('inv');
    const contentType = call.contentType;
    em.create(BodySchema, {
      id: bodyId,
      tenantId,
      contentType,
      content: body,
      sizeBytes: body.length,
      sha256: createHash('sha256').update(body).digest('hex'),
      createdAt: now,
    });
    const row = em.create(InvocationSchema, {
      id: invocationId,
      tenantId,
      agentId: agent.id,
      mode: 'transactional',
      status: 'pending',
      requestId,
      caller: userId,
      model,
      contentType,
      requestHeaders: forwardableHeaders(ctx.req.headers),
      requestBodyId: bodyId,
      requestBytes: body.length,
      attempts: 0,
      mcpMethod: call.mcp?.method ?? null,
      mcpTool: call.mcp?.tool ?? null,
      paymentNetwork: call.payment?.network ?? null,
      paymentAsset: call.payment?.asset ?? null,
      paymentAmount: call.payment?.amount ?? null,
      paymentPayer: call.payment?.payer ?? null,
      paymentNonce: call.payment?.nonce ?? null,
      paymentTransaction: call.payment?.transaction ?? null,
      createdAt: now,
      updatedAt: now,
    });
    await em.flush();

    try {
      await deps.temporal.workflow.start('InvocationWorkflow', {
        taskQueue: deps.config.temporal.taskQueue,
        workflowId: invocationId,
        args: [{ invocationId, tenantId, agentId: agent.id }],
        typedSearchAttributes: [
          { key: TenantId, value: tenantId },
          { key: AgentId, value: agent.id },
          { key: InvocationStatus, value: 'pending' },
        ],
        staticSummary: `${agent.name} (${agent.id})`,
      });
    } catch (err) {
      // Not accepted: remove the row so no pending invocation is left that nothing will run.
      await em.remove(row).flush().catch(() => undefined);
      deps.log.warn({ invocationId, err: (err as Error).message }, 'workflow start failed');
      throw new ApiError(503, 'service temporarily unavailable', { 'Retry-After': '1' });
    }

    ctx.status = 202;
    ctx.set('X-Gateway-Invocation-ID', invocationId);
    if (call.policyWarning) ctx.set('X-Gateway-Policy-Warning', call.policyWarning);
    ctx.body = { invocation_id: invocationId };
  });

  router.get('/proxy/:id/invocations/:invId', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('agt', ctx.params.id) || !isId('inv', ctx.params.invId)) throw notFound();
    const em = deps.orm.em.fork();
    const row = await em.findOne(InvocationSchema, { id: ctx.params.invId, tenantId, agentId: ctx.params.id });
    if (!row) throw notFound();
    let responseBody: Buffer | null = null;
    if (row.responseBodyId && (row.status === 'succeeded' || row.status === 'failed')) {
      const stored = await em.findOne(BodySchema, { id: row.responseBodyId, tenantId });
      responseBody = stored ? Buffer.from(stored.content) : null;
    }
    ctx.body = serializeInvocation(row, responseBody);
  });

  return router;
}
