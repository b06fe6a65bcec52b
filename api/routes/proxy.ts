// The proxy endpoints. One transactional call: (auth) → agent in tenant (404) → invocable
// (422) → rate limit (429) → X-Gateway-Model (400) → body within 32 MiB (413, while reading)
// → parse → policy stage → payment stage → claim-check the body and write the invocation row
// `pending` (one commit) while InvocationWorkflow starts → 202 once both are done. The streaming endpoint (api/proxy/stream.ts) passes the same gate.
import Router from '@koa/router';
import { InvocationSchema } from '../../gateway/db/entities.ts';
import { isId, newId } from '../../lib/ids.ts';
import { ApiError, notFound } from '../errors.ts';
import { coarseMessage } from '../../gateway/upstream/errors.ts';
import { MAX_TRANSACTIONAL_BODY, readCappedBody } from '../proxy/body.ts';
import { forwardableHeaders } from '../../gateway/upstream/headers.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import { parseMcpBody } from '../proxy/parse.ts';
import { admit, runStages } from '../proxy/gate.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/dialect.ts';
import { withPaymentRequired } from '../payment/stage.ts';
import { streamRoute } from '../proxy/stream.ts';
import type { ProxyServices } from '../proxy/services.ts';
import { recordedCallFields, type ProxyCall } from '../proxy/call.ts';
import {
  assertTemporalReachable,
  startInvocationWorkflow,
  temporalUnavailable,
  terminateIfStarted,
} from '../proxy/start.ts';
import { removeAccepted, writeAccepted, type AcceptedRow } from '../proxy/accept.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

export { MAX_TRANSACTIONAL_BODY } from '../proxy/body.ts';

export function proxyRoutes(deps: AppDeps, services: ProxyServices): Router<AuthState> {
  const router = new Router<AuthState>();

  router.post('/proxy/:id', async (ctx) => {
    const { tenantId, userId } = ctx.state.caller;
    const { agent, requestId, model } = await admit(ctx, deps, services);
    const held = services.bodyBudget.open(tenantId);
    ctx.res.once('close', held.release);
    const body = await readCappedBody(ctx.req, MAX_TRANSACTIONAL_BODY, deps.config.bodyPace, held);

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
    await runStages(ctx, deps, services, call, async () => {
      // Before any payment: Temporal known down, and (for a priced call) a credential that
      // cannot be resolved, which the workflow's call would otherwise fail after the payer paid.
      assertTemporalReachable(deps.temporal);
      if (agent.pricing && agent.credentialRef)
        await services.credentials.headersFor(tenantId, agent.credentialRef).catch(() => {
          throw new ApiError(502, coarseMessage('credential'));
        });
    });

    // Temporal gone down since: refused before anything is written (a paid call's payment stays
    // unbound, and the same header resumes it).
    assertTemporalReachable(deps.temporal);
    const invocationId = newId('inv');
    // The workflow start and the commit (body and row; for a paid call also the payment bound
    // to the row: one payment buys one call) run side by side; the 202 waits for both. The
    // start, the longer, is sent first; the row is built after it, inside the commit's promise,
    // so nothing thrown there can leave a started workflow unanswered. The activity reads the
    // row before it sends anything, so a workflow that outruns the commit only retries that
    // read; if the commit fails, the workflow is terminated, nothing is sent.
    const start = startInvocationWorkflow(deps.temporal, deps.config.temporal.taskQueue, invocationId, tenantId, agent);
    const commit = (async () => {
      const now = new Date();
      const row: AcceptedRow = {
        id: invocationId,
        tenantId,
        agentId: agent.id,
        requestId,
        caller: userId,
        model,
        contentType: call.contentType,
        requestHeaders: forwardableHeaders(ctx.req.headers),
        requestBytes: body.length,
        ...recordedCallFields(call),
        createdAt: now,
        updatedAt: now,
      };
      await writeAccepted(
        { orm: deps.orm, bodies: services.bodies, statements: services.statements },
        row,
        body,
        call.payment,
        call.policyDecision ?? null,
      );
    })();
    const [written, started] = await Promise.allSettled([commit, start]);
    if (written.status === 'rejected') {
      if (started.status === 'fulfilled')
        await started.value.terminate('invocation not accepted').catch(() => undefined);
      // The decision was made even though the call was not accepted: logged on its own.
      if (call.policyDecision) await services.policy.store.recordDecision(call.policyDecision).catch(() => undefined);
      throw withPaymentRequired(deps, call, written.reason);
    }
    if (started.status === 'rejected') {
      // Not accepted unless the start reached the server after all and its activity has claimed
      // the row: the row is removed (its payment released) only while still unclaimed.
      const removed = await removeAccepted(deps.orm, invocationId).catch(() => null);
      deps.log.warn(
        { invocationId, err: (started.reason as Error).message, accepted: removed === false },
        'workflow start failed',
      );
      if (removed !== false) {
        // Ended in case it exists; a row that could not be removed is then closed by the orphan sweep.
        terminateIfStarted(deps.temporal, invocationId);
        throw temporalUnavailable();
      }
    }

    ctx.status = 202;
    ctx.set('X-Gateway-Invocation-ID', invocationId);
    if (call.policyWarning) ctx.set('X-Gateway-Policy-Warning', call.policyWarning);
    if (call.payment?.responseHeader)
      ctx.set(PAYMENT_RESPONSE_HEADER[call.payment.dialect], call.payment.responseHeader);
    ctx.body = { invocation_id: invocationId };
  });

  router.post('/proxy/:id/stream', streamRoute(deps, services));

  router.get('/proxy/:id/invocations/:invId', async (ctx) => {
    const { tenantId } = ctx.state.caller;
    if (!isId('agt', ctx.params.id) || !isId('inv', ctx.params.invId)) throw notFound();
    const em = deps.orm.em.fork();
    const row = await em.findOne(InvocationSchema, { id: ctx.params.invId, tenantId, agentId: ctx.params.id });
    if (!row) throw notFound();
    // SPEC: the body appears once the call is complete, and only when it was captured.
    let responseBody: Buffer | null = null;
    if (row.responseBodyId && (row.status === 'succeeded' || row.status === 'failed')) {
      responseBody = (await services.bodies.get(tenantId, row.responseBodyId))?.content ?? null;
    }
    ctx.body = serializeInvocation(row, responseBody);
  });

  return router;
}
