// The budget stage, after policy and the known-upstream-failure check and before the endpoint's
// pre-payment needs and the payment stage: the call is reserved against every budget of its
// tenant its scope matches (gateway/budgets/gate.ts). A call a hard budget cannot take is a 429
// naming the budget, with Retry-After until its window resets (none for a `total` budget),
// before any payment is verified, bound or settled: its payer is never charged for it. The
// reservation is the admission's to give back when a later stage refuses the call (admit.ts).
// A refused call is recorded as an invocation naming the budget (gateway/budgets/refusals.ts).
// A call whose door reserved it with its rate-limit step (token-door.ts) has its verdict told
// here, in the same order; had its price come out otherwise than the door reckoned, that
// reservation is given back and the call reserved here.
// A call's payer is what a `payer` scope matches: a public call's caller (its payment was
// checked, not recorded or settled, to learn it: public-door.ts), and a /v1 call's offered
// payment, whose signature is checked here only when one of the tenant's budgets names a payer.
import { ApiError } from '../../errors.ts';
import { BudgetExceeded, BudgetUnavailable, told, type BudgetHold } from '../../../gateway/budgets/gate.ts';
import { payerOf } from '../../../gateway/payment/flow.ts';
import { isCharged } from '../../../gateway/payment/pricing.ts';
import type { PaymentHeaders } from '../../../gateway/payment/dialect.ts';
import { recordedCallFields, type ProxyCall } from '../../proxy/call.ts';
import type { RefusedCall } from '../../../gateway/budgets/refusals.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';
import type { AppDeps } from '../../deps.ts';
import type { Admitted } from '../door.ts';

const PAYER_CALLER = 'x402:';

async function payerOfCall(
  deps: AppDeps,
  parts: Pick<ProxyParts, 'budgets' | 'payment'>,
  call: ProxyCall,
  headers: PaymentHeaders,
): Promise<string | null> {
  if (call.caller.kind === 'x402' && call.caller.userId.startsWith(PAYER_CALLER))
    return call.caller.userId.slice(PAYER_CALLER.length);
  if (!isCharged(call.price) || !(await parts.budgets.gate.needsPayer(call.caller.tenantId))) return null;
  // A payment that does not verify matches no payer: the payment stage refuses it next.
  return payerOf(deps, parts.payment, call, headers).then(
    (offer) => offer?.payer ?? null,
    () => null,
  );
}

/** The refused call's row: its admission facts, no payment (it was refused before one). */
function refusedCallOf(call: ProxyCall): RefusedCall {
  const { mcpMethod, mcpTool, mcpServerId, a2aMethod, a2aSkill, a2aTaskId, a2aContextId } = recordedCallFields(call);
  return {
    id: call.invocationId,
    tenantId: call.caller.tenantId,
    agentId: call.agent.id,
    mode: call.mode,
    requestId: call.requestId,
    caller: call.caller.userId,
    callerKind: call.caller.kind,
    model: call.model,
    contentType: call.contentType,
    requestBytes: call.bodyBytes,
    mcpMethod,
    mcpTool,
    mcpServerId,
    a2aMethod,
    a2aSkill,
    a2aTaskId,
    a2aContextId,
  };
}

export async function budgetStage(
  deps: AppDeps,
  parts: Pick<ProxyParts, 'budgets' | 'payment'>,
  call: ProxyCall,
  headers: PaymentHeaders,
  atDoor?: Admitted['budget'],
): Promise<BudgetHold | null> {
  const amount = isCharged(call.price) ? BigInt(call.price.amount) : 0n;
  try {
    if (atDoor && atDoor.amount === amount) {
      if ('hold' in atDoor.verdict) return atDoor.verdict.hold;
      const refusal = atDoor.verdict.refused;
      throw refusal instanceof BudgetExceeded ? told(refusal) : refusal;
    }
    if (atDoor && 'hold' in atDoor.verdict) await atDoor.verdict.hold?.release();
    return await parts.budgets.gate.admit({
      tenantId: call.caller.tenantId,
      invocationId: call.invocationId,
      agentId: call.agent.id,
      user: call.caller.userId,
      payer: await payerOfCall(deps, parts, call, headers),
      amount,
    });
  } catch (err) {
    if (err instanceof BudgetExceeded) {
      parts.budgets.refusals.record(refusedCallOf(call), err.budgetId);
      throw new ApiError(
        429,
        'budget exceeded',
        err.retryAfterSeconds === null ? {} : { 'Retry-After': String(err.retryAfterSeconds) },
        { error: 'budget exceeded', budget_id: err.budgetId },
      );
    }
    if (err instanceof BudgetUnavailable)
      throw new ApiError(503, 'budgets cannot be checked now; retry later', { 'Retry-After': '1' });
    throw err;
  }
}
