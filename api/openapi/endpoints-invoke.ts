// The two call operations every door of the proxy serves (the token's `/v1/proxy/{id}` and a
// public agent's `/public/agents/{id}`): a transactional POST answered 202 and a streaming POST
// answered with the upstream's own status. The routes are the same (api/invoke/transactional.ts,
// api/invoke/streaming.ts); a door differs only in its URL, its caller, and what its statuses mean.
import type { z } from 'zod';
import { PaymentChallenge, ProxyHeaders, ProxyPath } from '../proxy/schema.ts';
import { ErrorBody } from './schemas.ts';
import type { Operation, ResponseSpec } from './responses.ts';

type CallKind = {
  operationId: string;
  summary: string;
  description?: string;
  /** The 402's description: a challenge (x402 v1 body) or a failed payment (error body). */
  paymentRequired: string;
  /** Every other status the door answers a call of this kind with. */
  failures: Record<string, ResponseSpec>;
  /** Answers of this door besides the call's own (the public door's x402 A2A transport: 200). */
  answers?: Record<string, ResponseSpec>;
};

export type CallDoor = {
  /** The transactional URL; the streaming one is this with `/stream`. */
  path: string;
  tag: string;
  auth: boolean;
  /** The request headers (default: the /v1 proxy's). */
  headers?: z.ZodObject;
  /** The headers of an answered call of either kind (the invocation id, the payment receipts). */
  answerHeaders: Record<string, string>;
  /** What the v2 PAYMENT-REQUIRED header of a 402 holds at this door. */
  challengeHeader: string;
  transactional: CallKind & { accepted: { description: string; body: z.ZodType } };
  streaming: CallKind;
};

/** A 503 the caller retries after Retry-After. */
export const retryLater = (description: string): ResponseSpec => ({
  description,
  body: ErrorBody,
  headers: { 'Retry-After': 'Seconds.' },
});

/** A 402: the challenge (x402 v1 in the body, v2 in PAYMENT-REQUIRED) or a failed payment. */
export const paymentChallenge = (description: string, challengeHeader: string): ResponseSpec => ({
  description,
  oneOf: [PaymentChallenge, ErrorBody],
  headers: { 'PAYMENT-REQUIRED': challengeHeader },
});

/** The door's transactional and streaming operations, in that order. */
export function callOperationsOf(door: CallDoor): [Operation, Operation] {
  const operation = (path: string, kind: CallKind, answer: Record<string, ResponseSpec>): Operation => ({
    method: 'post',
    path,
    operationId: kind.operationId,
    tag: door.tag,
    summary: kind.summary,
    ...(kind.description === undefined ? {} : { description: kind.description }),
    auth: door.auth,
    params: { path: ProxyPath, header: door.headers ?? ProxyHeaders },
    body: { mediaType: '*/*', required: false },
    responses: {
      ...kind.answers,
      ...answer,
      402: paymentChallenge(kind.paymentRequired, door.challengeHeader),
      ...kind.failures,
    },
  });
  return [
    operation(door.path, door.transactional, {
      202: { ...door.transactional.accepted, headers: door.answerHeaders },
    }),
    operation(`${door.path}/stream`, door.streaming, {
      default: {
        description: "The upstream's own status, headers and body, streamed.",
        body: { mediaType: '*/*' },
        headers: door.answerHeaders,
      },
    }),
  ];
}
