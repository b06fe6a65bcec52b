// The x402 A2A transport (x402 specs/transports-v2/a2a.md, the a2a-x402 extension v0.1): a
// payment for an A2A message travels in the message's metadata, and the answers say where the
// payment stands in the metadata of the task's status message. This module is the pure part:
// the extension's URI and keys, its activation header, reading and removing the payment keys
// of a request, and building the answers (an `input-required` task asking for payment, a
// `failed` one when a payment is refused, the receipt added to the agent's own answer), in the
// JSON shape of the spelling the caller used: A2A 1.0 (`SendMessage`: `{task}`, `TASK_STATE_*`,
// `ROLE_AGENT`, parts `{text}`) or 0.3 (`message/send`: `kind: "task"`, `input-required`,
// `agent`, parts `{kind: "text", text}`), as @a2a-js/sdk's clients read them.
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { parseKeepingNumbers } from '../jsonrpc/exact-json.ts';
import { isResultFor } from '../jsonrpc/response.ts';
import { responseRewriter } from '../jsonrpc/response-rewriter.ts';

/** The extension's URI, as the card declares it and clients activate it. */
export const A2A_X402_EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';

/** What the served card says of it: not required, since HTTP 402 stays accepted. */
export const A2A_X402_DESCRIPTION =
  'Payments with x402 (USDC per call) in message metadata: an unpaid message is answered with an input-required task carrying the PaymentRequired. Clients that do not activate the extension pay with HTTP 402 and the x402 payment headers instead.';

/** The activation headers: `A2A-Extensions` (A2A 1.0) and `X-A2A-Extensions` (0.3), comma-separated URIs. */
export const EXTENSION_HEADERS = ['a2a-extensions', 'x-a2a-extensions'] as const;

const X402_KEYS = {
  status: 'x402.payment.status',
  required: 'x402.payment.required',
  payload: 'x402.payment.payload',
  receipts: 'x402.payment.receipts',
  error: 'x402.payment.error',
} as const;

const KEY_PREFIX = 'x402.payment.';

/** Whether any of the header values lists the extension's URI. */
export function extensionActivated(values: Array<string | undefined>): boolean {
  return values.some((value) =>
    (value ?? '')
      .split(',')
      .map((uri) => uri.trim())
      .includes(A2A_X402_EXTENSION),
  );
}

/**
 * Forwarded headers without the extension's activation (lower-case names, as forwardableHeaders
 * gives them): the gateway speaks the extension, not the agent, which must never be told to ask
 * for a payment of its own. Other extensions listed pass; an emptied header goes.
 */
export function withoutActivation(headers: Record<string, string>): Record<string, string> {
  const out = { ...headers };
  for (const name of EXTENSION_HEADERS) {
    if (out[name] === undefined) continue;
    const kept = out[name]
      .split(',')
      .map((uri) => uri.trim())
      .filter((uri) => uri !== '' && uri !== A2A_X402_EXTENSION);
    if (kept.length > 0) out[name] = kept.join(', ');
    else delete out[name];
  }
  return out;
}

/** The methods a payment in message metadata is taken for: the ones that send a message. */
export const PAYABLE_METHODS = new Set(['SendMessage', 'SendStreamingMessage']);

/** The two spellings of the answers: the method as the caller spelled it says which. */
export type Spelling = '1.0' | '0.3';
export const spellingOf = (sent: string): Spelling => (sent.includes('/') ? '0.3' : '1.0');

/**
 * A payment task's id: minted by the gateway when it asks for payment, named by the paying
 * message's `taskId`. Its shape tells it from the agent's own task ids.
 */
const PAYMENT_TASK_PREFIX = 'x402-payment-';
const PAYMENT_TASK_ID = /^x402-payment-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
export const newPaymentTaskId = () => `${PAYMENT_TASK_PREFIX}${randomUUID()}`;
export const isPaymentTaskId = (id: unknown): id is string => typeof id === 'string' && PAYMENT_TASK_ID.test(id);

type Obj = Record<string, unknown>;
const objectOr = (value: unknown): Obj | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Obj) : null;

/** What a request's message says of its payment. */
export type MessagePayment = {
  /** Whether `x402.payment.payload` is present (whatever its value). */
  paid: boolean;
  payload: unknown;
  status: string | null;
  /** The message's `taskId` (or `task_id`) when it is a payment task id the gateway minted. */
  paymentTaskId: string | null;
  /** The message's context, if it names one. */
  contextId: string | null;
};

const messageOf = (request: unknown): Obj | null => objectOr(objectOr(objectOr(request)?.params)?.message);

export function messagePayment(request: unknown): MessagePayment {
  const message = messageOf(request);
  const metadata = objectOr(message?.metadata);
  const taskId = message?.taskId ?? message?.task_id;
  const contextId = message?.contextId ?? message?.context_id;
  return {
    paid: !!metadata && Object.hasOwn(metadata, X402_KEYS.payload),
    payload: metadata?.[X402_KEYS.payload],
    status: typeof metadata?.[X402_KEYS.status] === 'string' ? (metadata[X402_KEYS.status] as string) : null,
    paymentTaskId: isPaymentTaskId(taskId) ? taskId : null,
    contextId: typeof contextId === 'string' && contextId.length <= 256 ? contextId : null,
  };
}

/** Removes the `x402.payment.*` keys (in any casing) of one metadata object; true when one was there. */
function stripFrom(holder: Obj | null): boolean {
  const metadata = objectOr(holder?.metadata);
  if (!holder || !metadata) return false;
  const keys = Object.keys(metadata).filter((key) => key.toLowerCase().startsWith(KEY_PREFIX));
  for (const key of keys) delete metadata[key];
  if (keys.length > 0 && Object.keys(metadata).length === 0) delete holder.metadata;
  return keys.length > 0;
}

/**
 * Removes every `x402.payment.*` key from the message's metadata and from the request's own
 * (`params.metadata`), in any casing (and a metadata object left empty), in place; true when
 * one was there. The agent never sees a payment: one that reads keys loosely, or looks in the
 * request's metadata, must not find a payment to settle a second time.
 */
export function stripPaymentKeys(request: unknown): boolean {
  const params = objectOr(objectOr(request)?.params);
  const inMessage = stripFrom(objectOr(params?.message));
  const inParams = stripFrom(params);
  return inMessage || inParams;
}

const TASK_STATE: Record<Spelling, Record<'input-required' | 'failed', string>> = {
  '1.0': { 'input-required': 'TASK_STATE_INPUT_REQUIRED', failed: 'TASK_STATE_FAILED' },
  '0.3': { 'input-required': 'input-required', failed: 'failed' },
};

/** An agent message in the spelling's shape. */
function agentMessage(spelling: Spelling, ids: TaskIds, text: string, metadata: Obj): Obj {
  const common = { messageId: randomUUID(), taskId: ids.taskId, contextId: ids.contextId, metadata };
  return spelling === '1.0'
    ? { ...common, role: 'ROLE_AGENT', parts: [{ text }] }
    : { kind: 'message', ...common, role: 'agent', parts: [{ kind: 'text', text }] };
}

export type TaskIds = { taskId: string; contextId: string };

/** A task whose status message carries `metadata`, as the result of a send in the spelling's shape. */
function taskResult(
  spelling: Spelling,
  ids: TaskIds,
  state: 'input-required' | 'failed',
  text: string,
  metadata: Obj,
): Obj {
  const task = {
    ...(spelling === '0.3' ? { kind: 'task' } : {}),
    id: ids.taskId,
    contextId: ids.contextId,
    status: {
      state: TASK_STATE[spelling][state],
      message: agentMessage(spelling, ids, text, metadata),
      timestamp: new Date().toISOString(),
    },
  };
  return spelling === '1.0' ? { task } : task;
}

/** The result asking for payment: `input-required`, `payment-required`, the v2 PaymentRequired. */
export function paymentRequiredResult(spelling: Spelling, ids: TaskIds, required: unknown): Obj {
  return taskResult(spelling, ids, 'input-required', 'Payment is required to run this message.', {
    [X402_KEYS.status]: 'payment-required',
    [X402_KEYS.required]: required,
  });
}

/** The result of a payment the client declined (`payment-rejected`): `failed`, nothing run or kept. */
export function paymentRejectedResult(spelling: Spelling, ids: TaskIds): Obj {
  return taskResult(spelling, ids, 'failed', 'Payment declined; the message was not run.', {
    [X402_KEYS.status]: 'payment-rejected',
  });
}

/** A refused payment's error code, from the gate's coarse refusal. */
export function paymentErrorCode(reason: string): string {
  switch (reason) {
    case 'invalid payment':
      return 'INVALID_PAYMENT';
    case 'payment already used':
      return 'PAYMENT_ALREADY_USED';
    case 'settlement_failed':
      return 'SETTLEMENT_FAILED';
    case 'settlement_unavailable':
      return 'SETTLEMENT_UNAVAILABLE';
    default:
      return 'PAYMENT_FAILED';
  }
}

/** The result of a refused payment (the message was not run): `failed`, `payment-failed`, a failed receipt. */
export function paymentFailedResult(spelling: Spelling, ids: TaskIds, reason: string, network: string): Obj {
  return taskResult(spelling, ids, 'failed', `Payment failed: ${reason}.`, {
    [X402_KEYS.status]: 'payment-failed',
    [X402_KEYS.error]: paymentErrorCode(reason),
    [X402_KEYS.receipts]: [{ success: false, errorReason: reason, network, transaction: '' }],
  });
}

/**
 * The metadata object of the message an answer's result carries, created when the result is a
 * task or status update without a status message: a Task (`{task}` or `kind: "task"`), a status
 * update (`{statusUpdate}` or `kind: "status-update"`) or a Message (`{message}` or
 * `kind: "message"`). Null for anything else (an artifact update, an unknown shape).
 */
function answerMetadata(result: Obj, spelling: Spelling): Obj | null {
  let holder: Obj | null = null;
  let message: Obj | null = null;
  if (spelling === '1.0') {
    message = objectOr(result.message);
    holder = objectOr(result.task) ?? objectOr(result.statusUpdate);
    // A bare Task, as a 1.0 GetTask answers and some servers answer a send.
    if (!message && !holder && objectOr(result.status) && typeof result.id === 'string') holder = result;
  } else if (result.kind === 'message') message = result;
  else if (result.kind === 'task' || result.kind === 'status-update') holder = result;
  if (!message && holder) {
    const status = objectOr(holder.status);
    if (!status) return null;
    message = objectOr(status.message);
    if (!message) {
      const taskId = typeof holder.id === 'string' ? holder.id : String(holder.taskId ?? '');
      const ids = { taskId, contextId: String(holder.contextId ?? '') };
      message = agentMessage(spelling, ids, 'Payment completed.', {});
      status.message = message;
    }
  }
  if (!message) return null;
  const metadata = objectOr(message.metadata) ?? {};
  message.metadata = metadata;
  return metadata;
}

/**
 * The result with the receipt added (`payment-completed`, `receipts: [receipt]`), changed in
 * place; false when the result carries no message or task to put it on.
 */
export function addReceipt(result: unknown, spelling: Spelling, receipt: unknown): boolean {
  const r = objectOr(result);
  const metadata = r && answerMetadata(r, spelling);
  if (!metadata) return false;
  metadata[X402_KEYS.status] = 'payment-completed';
  metadata[X402_KEYS.receipts] = [receipt];
  return true;
}

/**
 * A wrapper adding `receipt` (addReceipt) to the first response to request `rpcId` in the
 * agent's answer: the JSON answer, or the first SSE event that answers the request with a task,
 * status update or message, through the bounded re-writer (gateway/jsonrpc/response-rewriter.ts),
 * its numbers as the agent wrote them; null when the answer is not plain JSON or SSE. The payment
 * is settled before the agent is called, so the first response to the request can carry it.
 */
export function receiptInjector(
  headers: IncomingHttpHeaders,
  rpcId: string | number,
  spelling: Spelling,
  receipt: unknown,
): ((body: Readable) => Readable) | null {
  return responseRewriter(headers, (text) => {
    if (!text.startsWith('{') || !isResultFor(text, rpcId)) return null;
    const response = parseKeepingNumbers(text) as { result: unknown };
    return addReceipt(response.result, spelling, receipt) ? JSON.stringify(response) : null;
  });
}
