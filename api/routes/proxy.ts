// The proxy endpoints. One transactional call: (auth) → agent in tenant (404) → invocable
// (422) → X-Gateway-Model (400) → rate limit (429) → body within 32 MiB (413, while reading)
// → parse (a 413 or a parse 400 gives the rate-limit tokens back) → policy stage → a place in the start backlog (503) → payment stage → the body, the
// invocation row `pending` (the intent to start) and a paid call's payment in one commit → 202
// → InvocationWorkflow started by this process at once (not waited for), else by the start relay
// (temporal/start-relay.ts). The streaming endpoint (api/proxy/stream.ts) passes the same gate.
import Router from '@koa/router';
import { agentInvocation } from '../../gateway/invocations/reads.ts';
import { isId, newId } from '../../lib/ids.ts';
import { errorKind } from '../../lib/error-kind.ts';
import { ApiError, notFound } from '../errors.ts';
import { coarseMessage } from '../proxy/upstream-failure.ts';
import { MAX_TRANSACTIONAL_BODY, declaredOver, readCappedBody } from '../proxy/body.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import { parseMcpBody } from '../proxy/mcp.ts';
import { isCharged } from '../../gateway/payment/pricing.ts';
import { cheapToParse, refundIfRefused, runStages, tokenDoor, type Door, type GateCtx } from '../proxy/gate.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/dialect.ts';
import { withPaymentRequired } from '../payment/stage.ts';
import { streamRoute } from '../proxy/stream.ts';
import { a2aCardRoute } from '../proxy/a2a-card.ts';
import { forwardedHeadersOf, parseA2aRequest } from '../proxy/a2a-x402.ts';
import type { ProxyServices } from '../proxy/services.ts';
import { recordedCallFields, withPrice, type ProxyCall } from '../proxy/call.ts';
import { startInvocationWorkflow } from '../../temporal/invocation-start.ts';
import type { BacklogPlace } from '../proxy/start-backlog.ts';
import { writeAccepted, type AcceptedRow } from '../../gateway/invocations/accept.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';
import { publicRequestUrl } from '../public-url.ts';
import { newPollKey, pollUrl, withNewPollUrl } from '../proxy/public-poll.ts';

/** The poll capability of a public call (docs/API.md): 128 random bits; only its SHA-256 is stored. */
/** POST of a transactional call, at either door (gate.ts Door). */
export function transactionalRoute(deps: AppDeps, services: ProxyServices, door: Door) {
  return async function transactional(ctx: GateCtx): Promise<void> {
    const admitted = await door.admit(ctx);
    const { agent, requestId, model } = admitted;
    const { tenantId } = admitted.caller;
    const held = services.bodyBudget.open(tenantId);
    ctx.res.once('close', held.release);
    const body = await refundIfRefused(
      admitted,
      413,
      () => readCappedBody(ctx.req, MAX_TRANSACTIONAL_BODY, deps.config.bodyPace, held),
      () => declaredOver(ctx.req, MAX_TRANSACTIONAL_BODY),
    );

    const a2a =
      agent.protocol === 'a2a'
        ? await refundIfRefused(
            admitted,
            400,
            () =>
              parseA2aRequest(
                ctx,
                body,
                agent,
                'transactional',
                door.speaksA2aPayments ? services.a2aPaymentTasks : null,
              ),
            () => cheapToParse(body),
          )
        : null;
    const call: ProxyCall = withPrice({
      caller: admitted.caller,
      agent,
      mode: 'transactional',
      invocationId: newId('inv'),
      requestId,
      model,
      contentType: ctx.get('content-type') || null,
      bodyBytes: body.length,
      resourceUrl: publicRequestUrl(ctx, deps.config.publicAddress),
      mcp:
        agent.protocol === 'mcp'
          ? await refundIfRefused(
              admitted,
              400,
              () => parseMcpBody(body),
              () => cheapToParse(body),
            )
          : null,
      a2a: a2a?.a2a ?? null,
      policyWarning: null,
      payment: null,
    });
    // A payment in `_meta` or A2A message metadata is never forwarded or stored: the body without
    // it (gateway/mcp/x402.ts, api/proxy/a2a-x402.ts); a message paying a kept one forwards the kept one.
    const forwarded = call.mcp?.forwardBody ?? a2a?.forwardBody ?? body;
    let place: BacklogPlace | undefined;
    const pollKey = door.issuesPollKeys ? newPollKey() : null;
    const { invocationId } = call;
    try {
      await runStages(ctx, deps, services, call, admitted, async () => {
        // Before any payment: a place in the start backlog (503 past its bound, Temporal away
        // too long), and (for a priced call) a credential that cannot be resolved, which the
        // workflow's call would otherwise fail after the payer paid.
        place = services.startBacklog.reserve(tenantId);
        if (isCharged(call.price) && agent.credentialRef)
          await services.credentials.headersFor(tenantId, agent.credentialRef).catch(() => {
            throw new ApiError(502, coarseMessage('credential'));
          });
      });
      // The accept commit: body, row `pending` (the intent to start) and, for a paid call, the
      // payment bound to the row (one payment buys one call). The 202 follows it.
      const now = new Date();
      const row: AcceptedRow = {
        id: invocationId,
        tenantId,
        agentId: agent.id,
        requestId,
        // The payer, for a public call: known once the stages ran (gate.ts identify).
        caller: call.caller.userId,
        callerKind: call.caller.kind,
        pollKeySha256: pollKey?.sha256 ?? null,
        model,
        contentType: call.contentType,
        requestHeaders: forwardedHeadersOf(ctx, call),
        requestBytes: forwarded.length,
        ...recordedCallFields(call),
        createdAt: now,
        updatedAt: now,
      };
      try {
        await writeAccepted(
          { orm: deps.orm, bodies: services.bodies, statements: services.statements },
          row,
          forwarded,
          call.payment,
          call.policyDecision ?? null,
        );
      } catch (err) {
        // The decision was made even though the call was not accepted: logged on its own.
        if (call.policyDecision) await services.policy.store.recordDecision(call.policyDecision).catch(() => undefined);
        throw withPaymentRequired(deps, call, err);
      }
    } catch (err) {
      place?.release();
      // A public payer resending under its payment identifier gets a poll URL again.
      throw pollKey ? await withNewPollUrl(ctx, deps, call.caller.userId, err) : err;
    }
    // Accepted. The start is sent now (or as soon as one of the process's starts in flight ends),
    // inside the call's trace, and not waited for: the 202 goes out while it travels. If it fails
    // (Temporal away, a deadline), the call keeps its place in the backlog until a relay starts it.
    const accepted = place!;
    accepted.bind(invocationId);
    services
      .startQueue(() =>
        startInvocationWorkflow(
          deps.temporal,
          deps.config.temporal.taskQueue,
          invocationId,
          tenantId,
          agent,
          deps.config.workflowStartDeadlineMs,
        ),
      )
      .then(
        () => accepted.release(),
        (err: unknown) =>
          deps.log.warn({ invocationId, err: errorKind(err) }, 'workflow start failed; left to the start relay'),
      );

    ctx.status = 202;
    ctx.set('X-Gateway-Invocation-ID', invocationId);
    if (call.policyWarning) ctx.set('X-Gateway-Policy-Warning', call.policyWarning);
    if (call.payment?.responseHeader)
      ctx.set(PAYMENT_RESPONSE_HEADER[call.payment.dialect], call.payment.responseHeader);
    ctx.body = pollKey
      ? { invocation_id: invocationId, poll_url: pollUrl(ctx, deps, invocationId, pollKey.key) }
      : { invocation_id: invocationId };
  };
}

export function proxyRoutes(deps: AppDeps, services: ProxyServices): Router<AuthState> {
  const router = new Router<AuthState>();
  const door = tokenDoor(deps, services);

  router.post('/proxy/:id', transactionalRoute(deps, services, door));
  router.post('/proxy/:id/stream', streamRoute(deps, services, door));
  router.get('/proxy/:id/.well-known/agent-card.json', a2aCardRoute(deps, services));

  router.get('/proxy/:id/invocations/:invId', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('agt', ctx.params.id) || !isId('inv', ctx.params.invId)) throw notFound();
    const { id: agentId, invId } = ctx.params;
    // A streaming call's row may still be on its way when its id is polled (recent-read.ts).
    const row = await services.recentReads.find(tenantId, invId, () =>
      agentInvocation(deps.orm, tenantId, agentId, invId),
    );
    if (!row) throw notFound();
    // The v1 contract: the body appears once the call is complete, and only when it was captured.
    let responseBody: Buffer | null = null;
    if (row.responseBodyId && (row.status === 'succeeded' || row.status === 'failed')) {
      responseBody = (await services.bodies.get(tenantId, row.responseBodyId))?.content ?? null;
    }
    ctx.body = serializeInvocation(row, responseBody);
  });

  return router;
}
