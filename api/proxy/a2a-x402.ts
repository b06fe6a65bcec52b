// Parse stage of a public A2A agent's message under the x402 A2A transport (gateway/a2a/x402.ts,
// api/payment/a2a-transport.ts). On a door that speaks it (the public one), for the methods that
// send a message:
// - `x402.payment.*` keys of the message's metadata never reach the agent: the request is
//   re-serialized without them (numbers as the caller wrote them), activated or not;
// - activated (`A2A-Extensions` or `X-A2A-Extensions` lists the extension; echoed back in
//   `X-A2A-Extensions`): the message's payload is the call's payment. A message naming a payment
//   task the gateway minted for this agent is the paying message: the request kept for that task
//   is the call (its facts, its price, the body forwarded), under the paying request's JSON-RPC id
//   (its method must be the kept one's); a payment task of another agent, expired or used, is 404. Any other message is
//   its own request (paid there and then, or kept if it is asked payment).
import { randomUUID } from 'node:crypto';
import { ApiError, badRequest } from '../errors.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import type { PaymentTasks } from '../../gateway/a2a/payment-tasks.ts';
import {
  A2A_X402_EXTENSION,
  EXTENSION_HEADERS,
  PAYABLE_METHODS,
  extensionActivated,
  messagePayment,
  spellingOf,
  stripPaymentKeys,
  withoutActivation,
} from '../../gateway/a2a/x402.ts';
import { forwardableHeaders } from '../../gateway/upstream/headers.ts';
import { refuseOversizeA2aMessage } from '../payment/a2a-transport.ts';
import { parseA2aBody } from './a2a.ts';
import { parseKeepingNumbers } from '../../gateway/jsonrpc/exact-json.ts';
import type { A2aCall, ProxyCall } from './call.ts';

type Headers = { get(name: string): string; set(name: string, value: string): void };

/**
 * The caller's headers as the upstream gets them (forwardableHeaders), less the x402 A2A
 * extension's activation when the gateway answered it.
 */
export function forwardedHeadersOf(
  ctx: { req: { headers: Parameters<typeof forwardableHeaders>[0] } },
  call: Pick<ProxyCall, 'a2a'>,
): Record<string, string> {
  const headers = forwardableHeaders(ctx.req.headers);
  return call.a2a?.x402 ? withoutActivation(headers) : headers;
}

/** The call's A2A facts, and the body to forward when it is not the one sent. */
export type ParsedA2a = { a2a: A2aCall; forwardBody: Buffer | null };

/**
 * The A2A call of this body: as parseA2aBody says, and on a door with payment tasks (`tasks`)
 * as the x402 A2A transport says (above).
 */
export async function parseA2aRequest(
  headers: Headers,
  body: Buffer,
  agent: Agent,
  mode: ProxyCall['mode'],
  tasks: PaymentTasks | null,
): Promise<ParsedA2a> {
  const a2a = parseA2aBody(body, agent, mode);
  if (!tasks || !a2a.method || !PAYABLE_METHODS.has(a2a.method)) return { a2a, forwardBody: null };
  const activated = extensionActivated(EXTENSION_HEADERS.map((name) => headers.get(name)));
  const plain = JSON.parse(body.toString('utf8')) as unknown;
  const payment = messagePayment(plain);
  if (!activated && !stripPaymentKeys(plain)) return { a2a, forwardBody: null };
  // Re-serialized (payment keys out, or kept until paid): small enough to keep, and its
  // re-parse keeping numbers' text is bounded too.
  refuseOversizeA2aMessage(body.length);
  const request = parseKeepingNumbers(body.toString('utf8')) as Record<string, unknown>;
  stripPaymentKeys(request);
  if (!activated) return { a2a, forwardBody: Buffer.from(JSON.stringify(request), 'utf8') };

  // A message that declines and pays at once says two things: it is refused, neither run nor charged.
  if (payment.paid && payment.status === 'payment-rejected')
    throw badRequest('a message with x402.payment.status payment-rejected must not carry x402.payment.payload');
  // Echoed under both spellings of the header (0.3 and 1.0 clients each read their own).
  headers.set('X-A2A-Extensions', A2A_X402_EXTENSION);
  headers.set('A2A-Extensions', A2A_X402_EXTENSION);
  const spelling = spellingOf(a2a.sent);
  const x402 = {
    spelling,
    status: payment.status,
    paid: payment.paid,
    payload: payment.payload,
    paymentTaskId: null,
  };
  if (payment.paymentTaskId) {
    const kept = await tasks.find(agent.id, payment.paymentTaskId);
    if (!kept) throw new ApiError(404, 'payment task not found through this agent');
    // The same method as the kept one (so its spelling too): the payment buys the run it was
    // asked for, at the price asked, not the kept message under another method's price.
    if (kept.method !== a2a.sent)
      throw badRequest(`the paying message must use the method of the message it pays for (${kept.method})`);
    const original = parseKeepingNumbers(kept.request) as Record<string, unknown>;
    const text = JSON.stringify({ ...original, id: request.id });
    const forwardBody = Buffer.from(text, 'utf8');
    const facts = parseA2aBody(forwardBody, agent, mode);
    return {
      a2a: {
        ...facts,
        x402: { ...x402, paymentTaskId: kept.taskId, contextId: kept.contextId, request: kept.request },
      },
      forwardBody,
    };
  }
  const text = JSON.stringify(request);
  return {
    a2a: { ...a2a, x402: { ...x402, contextId: payment.contextId ?? randomUUID(), request: text } },
    forwardBody: Buffer.from(text, 'utf8'),
  };
}
