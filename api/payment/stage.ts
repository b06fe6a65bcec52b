// The payment stage: the door of the payment flow (gateway/payment/flow.ts), which verifies,
// records and settles a call's payment and says, in its own words (gateway/payment/refusals.ts),
// when it does not accept one. Here each is answered as the v1 contract says (docs/API.md "x402
// payments"): no payment offered, the 402 with the v1 challenge in the body and the v2 one in
// PAYMENT-REQUIRED; a refused payment, a 402 with a coarse `{error}` and PAYMENT-REQUIRED; a
// payment still settling, a 503 with Retry-After; a payment identifier naming another payment,
// 409; a resend under an identifier already answered, that first 202. A call whose route chose
// the MCP or A2A answer style gets its 402s in that style (api/proxy/mcp.ts, a2a-transport.ts).
import { ApiError, conflict } from '../errors.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../deps.ts';
import {
  offeredEntries,
  payForCall,
  payerOf as verifiedPayerOf,
  precheckOffer as precheckFlowOffer,
  type PaymentGate,
  type PaymentRecord,
} from '../../gateway/payment/flow.ts';
import {
  PaymentAlreadyAnswered,
  PaymentIdentifierConflict,
  PaymentRefused,
  PaymentRequired,
  PaymentStillSettling,
} from '../../gateway/payment/refusals.ts';
import { PaymentUnavailable } from '../../gateway/payment/unavailable.ts';
import { ChannelBusy, ChannelRefunded } from '../../gateway/payment/channels/admission.ts';
import { PaymentAlreadyBound } from '../../gateway/payment/binding.ts';
import { priceOf } from '../../gateway/payment/pricing.ts';
import { challengeEntries } from '../../gateway/payment/schemes/index.ts';
import type { PaymentHeaders } from '../../gateway/payment/dialect.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import type { Challenge, ChallengeEntry } from '../../x402/schemas.ts';
import { PAYMENT_RESPONSE_HEADER, paymentRequiredHeader } from './x402-headers.ts';
import { inAnswerStyle } from '../proxy/mcp.ts';
import { discoveryExtensionsOf } from '../discovery/bazaar.ts';
import { A2aPaymentAskedAgain } from './a2a-transport.ts';

/** Retry-After of a channel held by another call: calls on one channel take as long as their answers. */
const CHANNEL_BUSY_RETRY_AFTER_S = 1;

/** Retry-After of a 503 whose payment is still settling: a settle answers within seconds. */
const SETTLING_RETRY_AFTER_S = 3;

/** The answer whose only advice is to resend the same payment header (docs/SETTLEMENT.md, the payer's promise). */
export function stillSettling(): ApiError {
  return new ApiError(503, 'payment is still settling; retry with the same payment header', {
    'Retry-After': String(SETTLING_RETRY_AFTER_S),
  });
}

/** The answer of the first attempt a retry with the same payment identifier gets back. */
class EarlierOutcome extends ApiError {}

/** The invocation an answer to a resend under a known identifier names, or null for any other error. */
export function earlierInvocationOf(err: unknown): string | null {
  if (!(err instanceof EarlierOutcome)) return null;
  return (err.body as { invocation_id: string }).invocation_id;
}

/** What a payment answer is shaped by: the answer style and the public agent's description. */
type AnsweredCall = Pick<ProxyCall, 'agent' | 'mcp' | 'a2a' | 'paymentAnswer'>;

/** The 402 of a call offering no payment: the v1 challenge in the body, the v2 one in PAYMENT-REQUIRED. */
function challengeAnswer(
  config: PaymentConfig,
  entries: ChallengeEntry[],
  call: Pick<ProxyCall, 'agent' | 'mcp'>,
): ApiError {
  const v1: Challenge = { x402Version: 1, error: 'X-PAYMENT header is required', accepts: entries };
  return new ApiError(
    402,
    'payment required',
    paymentRequiredHeader(config, entries, 'PAYMENT-SIGNATURE header is required', discoveryExtensionsOf(call)),
    v1,
  );
}

/**
 * The challenge entries an unpaid call at this price is offered (gateway/payment/flow.ts
 * offeredEntries: the tenant facilitator's kinds read when the scheme needs them); an entry that
 * cannot be offered now is the stage's 503.
 */
export async function challengeEntriesOf(
  deps: AppDeps,
  gate: PaymentGate,
  call: Pick<ProxyCall, 'agent' | 'resourceUrl' | 'price'>,
): Promise<ChallengeEntry[]> {
  try {
    return await offeredEntries(deps, gate, { ...call, price: call.price!, caller: { tenantId: call.agent.tenantId } });
  } catch (err) {
    throw unavailableAnswer(err);
  }
}

/** The challenge of a priced agent's call whose price needs no body (a public agent's unpaid request). */
export async function challengeError(
  deps: AppDeps,
  gate: PaymentGate,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'resourceUrl'>,
): Promise<ApiError> {
  const entries = await challengeEntriesOf(deps, gate, { ...call, price: priceOf(call) });
  return challengeAnswer(gate.config, entries, call);
}

/** A refusal's 402: `{error}` and PAYMENT-REQUIRED saying the same, then the call's answer style. */
function refusalAnswer(
  config: PaymentConfig,
  call: AnsweredCall,
  entries: ChallengeEntry[],
  reason: string,
  headers: Record<string, string> = {},
  body?: ApiError['body'],
): ApiError {
  return inAnswerStyle(
    config,
    call,
    entries[0],
    new ApiError(
      402,
      reason,
      { ...headers, ...paymentRequiredHeader(config, entries, reason, discoveryExtensionsOf(call)) },
      body,
    ),
  );
}

/** The flow's outcomes, answered; anything else unchanged. */
function answerOf(config: PaymentConfig, call: AnsweredCall, err: unknown): unknown {
  if (err instanceof PaymentRequired)
    return inAnswerStyle(config, call, err.entries[0], challengeAnswer(config, err.entries, call));
  if (err instanceof PaymentRefused) {
    // A corrective refusal under the x402 A2A transport is a payment asked again, its message
    // kept by the door (api/admission/public-door.ts), not a failed task.
    if (err.corrective && call.paymentAnswer === 'a2a') return new A2aPaymentAskedAgain(err.reason, err.entries);
    return refusalAnswer(config, call, err.entries, err.reason);
  }
  if (err instanceof PaymentStillSettling) return stillSettling();
  // batch-settlement: another call holds the channel (the spec's channel_busy), or a cooperative
  // refund was done instead of the call.
  if (err instanceof ChannelBusy)
    return refusalAnswer(config, call, err.entries, err.message, { 'Retry-After': String(CHANNEL_BUSY_RETRY_AFTER_S) });
  if (err instanceof ChannelRefunded)
    return new ApiError(
      200,
      'refunded',
      { 'PAYMENT-RESPONSE': err.responseHeader },
      { refunded: err.refunded, transaction: err.transaction },
    );
  if (err instanceof PaymentIdentifierConflict) return conflict(err.message);
  if (err instanceof PaymentAlreadyAnswered) {
    const headers: Record<string, string> = { 'X-Gateway-Invocation-ID': err.invocationId };
    if (err.receipt) headers[PAYMENT_RESPONSE_HEADER[err.receipt.dialect]] = err.receipt.value;
    return new EarlierOutcome(202, err.message, headers, { invocation_id: err.invocationId });
  }
  return unavailableAnswer(err);
}

/**
 * A scheme that cannot be offered now, answered as a payment still settling: a 503, a retry
 * later may find the facilitator readable. Anything else unchanged.
 */
function unavailableAnswer(err: unknown): unknown {
  if (err instanceof PaymentUnavailable)
    return new ApiError(503, 'payment cannot be taken now; retry later', {
      'Retry-After': String(SETTLING_RETRY_AFTER_S),
    });
  return err;
}

async function answering<T>(config: PaymentConfig, call: AnsweredCall, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    throw answerOf(config, call, err);
  }
}

/**
 * The checksummed address of the payer of this call's offered payment, verified against the
 * call's terms, and its nonce; null when the call costs nothing. A public call's caller
 * (api/admission/public-door.ts), known before policy.
 */
export function payerOf(
  deps: AppDeps,
  gate: PaymentGate,
  call: ProxyCall,
  headers: PaymentHeaders,
): Promise<{ payer: string; nonce: string } | null> {
  return answering(gate.config, call, () => verifiedPayerOf(deps, gate, call, headers));
}

/**
 * A public call's header payment checked before its tokens are taken or its body read, when its
 * price does not depend on the body (gateway/payment/flow.ts precheckOffer). Throws the stage's 402.
 */
export function precheckOffer(
  deps: AppDeps,
  gate: PaymentGate,
  call: Pick<ProxyCall, 'agent' | 'resourceUrl' | 'requestId' | 'caller'>,
  headers: PaymentHeaders,
): Promise<void> {
  const early = { ...call, mcp: null, price: priceOf({ agent: call.agent, mcp: null }) };
  return answering(gate.config, early, () => precheckFlowOffer(deps, gate, early, headers));
}

/** The call's payment, verified, recorded and settled (null when it costs nothing); throws its answers. */
export function paymentStage(
  deps: AppDeps,
  gate: PaymentGate,
  call: ProxyCall,
  headers: PaymentHeaders,
): Promise<PaymentRecord | null> {
  return answering(gate.config, call, () => payForCall(deps, gate, call, headers));
}

/**
 * A refusal raised after this stage (the payment bound meanwhile by a concurrent request with
 * the same authorization: PaymentAlreadyBound) is a 402 carrying the call's PAYMENT-REQUIRED
 * like the stage's own 402s.
 */
export function withPaymentRequired(deps: AppDeps, call: ProxyCall, err: unknown): unknown {
  // Not written (a channel payment's lease lapsed before its accept): the same payment again.
  if (err instanceof PaymentStillSettling) return stillSettling();
  if (err instanceof PaymentAlreadyBound) err = new ApiError(402, err.message);
  if (!(err instanceof ApiError) || err.status !== 402 || !call.price) return err;
  // A concurrent resend under the same payment identifier bound it first: that call's answer is
  // the one this payer gets back, on its next resend (gateway/payment/identifier.ts), so not a 402 now.
  if (call.payment?.paymentId) return stillSettling();
  const config = deps.config.payment;
  // The entries the payment was verified against (their facilitator's kinds read then); a call
  // with no payment has only the entries that need no facilitator to offer.
  let entries: ChallengeEntry[];
  try {
    entries = call.payment?.offered ?? challengeEntries(config, call.price, call.resourceUrl);
  } catch (caught) {
    return unavailableAnswer(caught);
  }
  return refusalAnswer(config, call, entries, err.message, err.headers, err.body);
}
