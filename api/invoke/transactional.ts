// POST of a transactional call, at either door: admitted (api/admission/admit.ts), then the
// accept commit (the body, the invocation row `pending`, the intent to start, and a paid call's
// payment, in one commit) → 202 → InvocationWorkflow started by this process at once (not
// waited for), else by the start relay (temporal/start-relay.ts).
import { errorKind } from '../../lib/error-kind.ts';
import { admit } from '../admission/admit.ts';
import { TRANSACTIONAL } from '../admission/endpoint.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/x402-headers.ts';
import { withPaymentRequired } from '../payment/stage.ts';
import { forwardedHeadersOf } from '../proxy/a2a-x402.ts';
import { recordedCallFields } from '../proxy/call.ts';
import { newPollKey, pollUrl, withNewPollUrl } from '../proxy/public-poll.ts';
import { startInvocationWorkflow } from '../../temporal/invocation-start.ts';
import { writeAccepted, type AcceptedRow } from '../../gateway/invocations/accept.ts';
import { letChannelGo } from '../../gateway/payment/channels/owners.ts';
import type { CallCtx, Door } from '../admission/door.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';

export function transactionalRoute(deps: AppDeps, parts: ProxyParts, door: Door) {
  /** A public payer resending under its payment identifier gets a poll URL again (public-poll.ts). */
  const answered = async (ctx: CallCtx, err: unknown): Promise<unknown> => {
    const call = ctx.state.call;
    return door.issuesPollKeys && call ? await withNewPollUrl(ctx, deps, call.caller.userId, err) : err;
  };

  return async function transactional(ctx: CallCtx): Promise<void> {
    let admission;
    try {
      admission = await admit(ctx, deps, parts, door, TRANSACTIONAL);
    } catch (err) {
      throw await answered(ctx, err);
    }
    const { call } = admission;
    // The whole body was read (TRANSACTIONAL.readsWholeBody): the bytes.
    const forwarded = admission.body as Buffer;
    const place = admission.place!;
    const { invocationId, agent, requestId, model } = call;
    const { tenantId } = call.caller;
    const pollKey = door.issuesPollKeys ? newPollKey() : null;
    // The accept commit: body, row `pending` (the intent to start) and, for a paid call, the
    // payment bound to the row (one payment buys one call). The 202 follows it.
    const now = new Date();
    const row: AcceptedRow = {
      id: invocationId,
      tenantId,
      agentId: agent.id,
      requestId,
      // The payer, for a public call: known once admission identified it.
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
        { orm: deps.orm, bodies: parts.bodies, statements: parts.statements },
        row,
        forwarded,
        call.payment,
        call.policyDecision ?? null,
      );
    } catch (err) {
      // The decision was made even though the call was not accepted: logged on its own.
      if (call.policyDecision) await parts.policy.store.recordDecision(call.policyDecision).catch(() => undefined);
      place.release();
      await admission.budget?.release();
      // Not accepted: a channel payment's hold on its channel goes with it (nothing is charged).
      await letChannelGo(deps.orm, parts.payment.owners, call.payment?.channel);
      throw await answered(ctx, withPaymentRequired(deps, call, err));
    }
    // Accepted. The start is sent now (or as soon as one of the process's starts in flight ends),
    // inside the call's trace, and not waited for: the 202 goes out while it travels. If it fails
    // (Temporal away, a deadline), the call keeps its place in the backlog until a relay starts it.
    place.bind(invocationId);
    parts
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
        () => place.release(),
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
