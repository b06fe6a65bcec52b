// The x402 A2A transport's answers (x402 specs/transports-v2/a2a.md; the domain's part is
// gateway/a2a/x402.ts). On a public A2A agent's URLs, a message sent with the extension activated
// is paid in its metadata and told about its payment as a JSON-RPC *result* (HTTP 200), never an
// HTTP 402:
// - unpaid: a task in `input-required` whose status message carries `payment-required` and the
//   v2 PaymentRequired; the message is kept under the task's id (gateway/a2a/payment-tasks.ts)
//   for the paying message that names it;
// - a payment refused before the message ran: a task in `failed` with `payment-failed`, an error
//   code and a failed receipt; but a corrective refusal (batch-settlement's: the voucher's
//   cumulative ceiling is not the channel's) asks for the payment again, `input-required` on a
//   new payment task keeping the same message (the task the refused payment took, moved to the
//   new id), its PaymentRequired carrying the channel's state and the spec's error code, from
//   which the client's scheme recovers and pays that task;
// - a payment task the client declines (`payment-rejected`): the task `failed`, its message dropped.
// A streaming method gets the same task as the one event of an SSE answer. Everything else the
// gate refuses (429, 503 still settling, 409) keeps its HTTP answer.
import { ApiError } from '../errors.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { caip2Network } from '../../x402/v2.ts';
import { paymentRequiredV2 } from '../../gateway/payment/dialect.ts';
import type { ChallengeEntry } from '../../x402/schemas.ts';
import { discoveryExtensionsOf } from '../discovery/bazaar.ts';
import { MAX_PAYMENT_TASK_BYTES, type PaymentTasks } from '../../gateway/a2a/payment-tasks.ts';
import {
  newPaymentTaskId,
  paymentFailedResult,
  paymentRejectedResult,
  paymentRequiredResult,
} from '../../gateway/a2a/x402.ts';
import { rpcResult } from '../../gateway/jsonrpc/response.ts';

/** How long a caller told the tenant's payment tasks are full waits before asking again. */
const FULL_RETRY_AFTER_S = 5;

/** What a call paid (or to be paid) through the extension carries: its A2A facts and the extension's. */
type A2aPaidCall = Pick<ProxyCall, 'agent' | 'mcp' | 'a2a' | 'resourceUrl' | 'caller' | 'price'>;

/** The JSON-RPC answer with this result: JSON, or for a streaming method one SSE event. */
function answer(call: Pick<ProxyCall, 'a2a'>, message: string, result: Record<string, unknown>): ApiError {
  const response = rpcResult(call.a2a?.rpcId, result);
  if (!call.a2a?.streaming) return new ApiError(200, message, {}, response);
  return new ApiError(
    200,
    message,
    { 'Content-Type': 'text/event-stream', 'X-Accel-Buffering': 'no' },
    `data: ${JSON.stringify(response)}\n\n`,
  );
}

const idsOf = (call: Pick<ProxyCall, 'a2a'>, taskId: string) => ({ taskId, contextId: call.a2a!.x402!.contextId });

/**
 * A corrective refusal of a payment made through the extension (the stage's answer of it): the
 * door asks for the payment again with a2aPaymentRequired, `entries` and the refusal's code.
 * An HTTP 402 to any door that does not.
 */
export class A2aPaymentAskedAgain extends ApiError {
  readonly entries: ChallengeEntry[];
  constructor(reason: string, entries: ChallengeEntry[]) {
    super(402, reason);
    this.entries = entries;
  }
}

/**
 * The `input-required` answer of an unpaid message: the message kept under a new payment task
 * (or the one the message named, still kept), the PaymentRequired of `entries` (the stage's
 * challengeEntriesOf) in its status message. `again`: a paid message's corrective refusal
 * (A2aPaymentAskedAgain), asked under a new payment task whatever the message named, its
 * PaymentRequired's `error` the refusal's code; `taken`, the payment task the refused payment
 * took (and by which payment), is moved to the new id (PaymentTasks.reissue).
 * Throws 429 when the tenant, or the client (its rate-limit identity), already holds its maximum
 * of pending payment tasks.
 */
export async function a2aPaymentRequired(
  config: PaymentConfig,
  tasks: PaymentTasks,
  call: A2aPaidCall,
  entries: ChallengeEntry[],
  client: string,
  again?: { refusal: A2aPaymentAskedAgain; taken: { taskId: string; paidBy: string } | null },
): Promise<ApiError> {
  const x402 = call.a2a!.x402!;
  const error = again?.refusal.message ?? 'payment required';
  const required = paymentRequiredV2(config, entries, error, discoveryExtensionsOf(call));
  let taskId = again ? null : x402.paymentTaskId;
  if (again?.taken) {
    // The task the refused payment took, moved to a new id with its message (one row, not two).
    const moved = newPaymentTaskId();
    const { taskId: taken, paidBy } = again.taken;
    if (await tasks.reissue(call.agent.id, taken, paidBy, moved, entries[0].maxTimeoutSeconds)) taskId = moved;
  }
  if (!taskId) {
    // The parse bounded the body sent; this is the request as it will be kept.
    refuseOversizeA2aMessage(Buffer.byteLength(x402.request, 'utf8'));
    taskId = newPaymentTaskId();
    const kept = await tasks.save(
      call.caller.tenantId,
      call.agent.id,
      { taskId, contextId: x402.contextId, method: call.a2a!.sent, request: x402.request },
      entries[0].maxTimeoutSeconds,
      client,
    );
    if (!kept)
      throw new ApiError(429, 'too many payments pending at this agent', { 'Retry-After': String(FULL_RETRY_AFTER_S) });
  }
  return answer(call, 'payment required', paymentRequiredResult(x402.spelling, idsOf(call, taskId), required));
}

/**
 * The client declined to pay for the payment task its message names (`payment-rejected`): the
 * kept message goes, and the task is answered `failed` with `payment-rejected`.
 */
export async function a2aPaymentDeclined(tasks: PaymentTasks, call: A2aPaidCall): Promise<ApiError> {
  const x402 = call.a2a!.x402!;
  const taskId = x402.paymentTaskId!;
  await tasks.remove(call.agent.id, taskId);
  return answer(call, 'payment rejected', paymentRejectedResult(x402.spelling, idsOf(call, taskId)));
}

/**
 * A payment refusal (402) in the extension's style when the call was paid (or asked to be) through
 * it: the `failed` task, on the payment task the message named or a new id. Any other refusal,
 * or a call without the extension, is returned unchanged.
 */
export function a2aPaymentRefused(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'a2a' | 'paymentAnswer'>,
  err: ApiError,
): ApiError {
  const x402 = call.a2a?.x402;
  if (err.status !== 402 || call.paymentAnswer !== 'a2a' || !x402) return err;
  const taskId = x402.paymentTaskId ?? newPaymentTaskId();
  const network = caip2Network(config.domain.chainId);
  return answer(call, err.message, paymentFailedResult(x402.spelling, idsOf(call, taskId), err.message, network));
}

/** A message sent with the extension must be small enough to keep until it is paid. */
export function refuseOversizeA2aMessage(bytes: number): void {
  if (bytes > MAX_PAYMENT_TASK_BYTES)
    throw new ApiError(
      413,
      `an A2A message sent with the x402 extension must be at most ${MAX_PAYMENT_TASK_BYTES / 1024} KiB`,
    );
}
