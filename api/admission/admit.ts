// Admission: the one ordered path every proxied call passes, both endpoints (endpoint.ts), both
// doors (door.ts) and every transport (HTTP, MCP, A2A), before anything is forwarded. In the v1
// contract's order:
//   agent (404, 422) → rate limit (429)   the door's: token-door.ts, public-door.ts
//   → body (413) → parse (400)             a cheap refusal gives its tokens back (refund.ts)
//   → the call's facts and price
//   → identify                            the public door: the payer becomes the caller
//   → A2A task binding (404) → policy (403)
//   → known upstream failure (502, 503)   a priced call its upstream is known to fail
//   → budgets (429)                        reserved against every matching budget (stages/budget.ts;
//                                         an HTTP agent's /v1 call reserved by its door's rate-limit
//                                         step, its verdict told here; a refusal before gives it back)
//   → the endpoint's pre-payment needs    a start-backlog place (503), the credential (502)
//   → payment (402)
// A call denied by policy is never told to pay; nothing the gateway could still refuse comes
// after the payment, so a payer is never charged for a call it then refuses.
import type { Readable } from 'node:stream';
import { ApiError } from '../errors.ts';
import { checkTaskBinding } from '../proxy/a2a.ts';
import { policyStage } from '../policy/stage.ts';
import { paymentStage } from '../payment/stage.ts';
import { paymentHeadersOf } from '../payment/x402-headers.ts';
import { receiveBody } from './stages/body.ts';
import { parseBody } from './stages/parse.ts';
import { callFacts } from './stages/facts.ts';
import { refuseKnownUpstreamFailure } from './stages/known-upstream-failure.ts';
import { reserveBacklogPlace } from './stages/backlog-place.ts';
import { credentialStage } from './stages/credential.ts';
import { budgetStage } from './stages/budget.ts';
import type { BudgetHold } from '../../gateway/budgets/gate.ts';
import { letChannelGo } from '../../gateway/payment/channels/owners.ts';
import type { CallCtx, Door } from './door.ts';
import type { Endpoint } from './endpoint.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { BacklogPlace } from '../proxy/start-backlog.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';

export type Admission = {
  /** The call, its policy warning and payment filled in. */
  call: ProxyCall;
  /** The body to send up: the bytes when read or already here, else the request stream. */
  body: Buffer | Readable;
  /** The caller's Content-Length (streaming endpoint). */
  declaredLength: number | null;
  /** The start-backlog place, when the endpoint needs one: the endpoint's to bind or release from here on. */
  place: BacklogPlace | null;
  /** The credential headers (`resolve`; null when a free call's could not be resolved); undefined for `check-if-charged`. */
  credentialHeaders: Record<string, string> | null | undefined;
  /**
   * The call's budget reservation (null when no budget matches): the endpoint's to give back
   * when it refuses the call before recording it; else its row trues it up (gateway/budgets/reconcile.ts).
   */
  budget: BudgetHold | null;
};

type AdmissionParts = Pick<
  ProxyParts,
  | 'agents'
  | 'limiter'
  | 'bodyBudget'
  | 'a2aPaymentTasks'
  | 'a2aTasks'
  | 'policy'
  | 'upstream'
  | 'startBacklog'
  | 'credentials'
  | 'payment'
  | 'budgets'
>;

export async function admit(
  ctx: CallCtx,
  deps: AppDeps,
  parts: AdmissionParts,
  door: Door,
  endpoint: Endpoint,
): Promise<Admission> {
  const admitted = await door.admit(ctx);
  // A reservation the door made (token-door.ts) is given back by any refusal before the budget stage takes it.
  const atDoor = admitted.budget && 'hold' in admitted.budget.verdict ? admitted.budget.verdict.hold : null;
  let body: Buffer | Readable;
  let call: ProxyCall;
  let received: Awaited<ReturnType<typeof receiveBody>>;
  let headers: ReturnType<typeof paymentHeadersOf>;
  let budget: BudgetHold | null;
  try {
    received = await receiveBody(ctx, deps, parts, admitted, endpoint);
    const parsed = await parseBody(ctx, parts, door, admitted, endpoint.mode, received.body);
    body = parsed.forwardBody ?? received.body;
    call = callFacts(ctx, deps, admitted, endpoint, received, parsed, body);
    ctx.state.call = call;

    await admitted.identify?.(call);
    // An A2A call about a task: only the caller side the task is bound to, once it is known.
    await checkTaskBinding(parts.a2aTasks, call);
    const policy = await policyStage(parts.policy, call);
    if (policy.action === 'deny') throw new ApiError(403, 'denied by policy');
    if (policy.action === 'warn') call.policyWarning = policy.reason;
    await refuseKnownUpstreamFailure(deps, parts.upstream, call);
    headers = paymentHeadersOf((name) => ctx.get(name));
    budget = await budgetStage(deps, parts, call, headers, admitted.budget);
  } catch (err) {
    await atDoor?.release();
    throw err;
  }

  let place: BacklogPlace | null = null;
  try {
    place = endpoint.needsBacklogPlace ? reserveBacklogPlace(parts, call) : null;
    const credentialHeaders = await credentialStage(parts, call, endpoint.credential);
    try {
      call.payment = await paymentStage(deps, parts.payment, call, headers);
    } catch (err) {
      throw admitted.refused ? await admitted.refused(call, err) : err;
    }
    if (call.payment) await admitted.settled?.();
    return { call, body, declaredLength: received.declaredLength, place, credentialHeaders, budget };
  } catch (err) {
    place?.release();
    await budget?.release();
    // A channel payment admitted before a later refusal holds its channel: let go, nothing charged.
    await letChannelGo(deps.orm, parts.payment.owners, call.payment?.channel);
    throw err;
  }
}
