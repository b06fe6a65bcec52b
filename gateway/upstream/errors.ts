// The gateway's error classes for upstream calls. Every failure is reduced to one of these
// before it reaches a record, a log line, a workflow history or a caller: raw undici errors
// carry addresses and ports, which must never leave the process. The door answers each class
// with its status and message (api/proxy/upstream-failure.ts).
import { errors as undiciErrors } from 'undici';

export type ErrorClass =
  /** No answer within the deadline (connect, headers or body). */
  | 'timeout'
  /** Refused, reset before any answer, DNS failure, TLS failure. */
  | 'connect'
  /** The resolved address is internal (SSRF guard at connect time). */
  | 'blocked'
  /** The upstream's circuit breaker is open: failed fast, nothing sent. */
  | 'circuit_open'
  /** The upstream answered with a client-error status (recorded on completed calls, for analytics). */
  | 'upstream_4xx'
  /** The upstream answered with a server-error status (recorded on completed calls, for analytics). */
  | 'upstream_5xx'
  /** The upstream's response broke off after it had started. */
  | 'stream_interrupted'
  /** The streaming caller went away; the upstream call was aborted. */
  | 'caller_aborted'
  /** A worker died while the request may already have reached the upstream, and the agent does not allow re-sending. */
  | 'interrupted'
  /** The agent's credential could not be resolved at call time. */
  | 'credential'
  /** The gateway could not form the call (e.g. the agent lost its upstream_url). */
  | 'protocol'
  /** The gateway itself failed (e.g. its database was down for longer than the activity's retries). */
  | 'internal'
  /** A transactional call's workflow was terminated or cancelled before it completed the call. */
  | 'workflow_terminated'
  /** A transactional call's workflow failed, timed out or was forgotten by Temporal before it completed the call. */
  | 'workflow_failed'
  /** Refused at admission by a hard budget (gateway/budgets/), before payment: nothing was sent. */
  | 'budget_exceeded'
  /**
   * A transactional call paid from a channel whose lease lapsed while it waited and was taken by
   * another call: not sent, nothing charged (its voucher's ceiling paid for that call).
   */
  | 'payment_lapsed';

export class UpstreamError extends Error {
  readonly errorClass: ErrorClass;
  /** Whether the request may have reached the upstream (decides whether it may be re-sent). */
  readonly reached: boolean;
  constructor(errorClass: ErrorClass, reached: boolean, message = `upstream call failed: ${errorClass}`) {
    super(message);
    this.name = 'UpstreamError';
    this.errorClass = errorClass;
    this.reached = reached;
  }
}

/** Raised by the connect-time SSRF guard; carries no address. */
export class BlockedAddressError extends Error {
  readonly code = 'UPSTREAM_BLOCKED';
  constructor() {
    super('upstream address not allowed');
    this.name = 'BlockedAddressError';
  }
}

/** Errors that happen before a single request byte can have left: always safe to retry. */
const CONNECT_PHASE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_NONAME',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** Reduces anything undici (or our connector) throws to a class and whether the request may have reached the upstream. */
export function classifyError(err: unknown): { errorClass: ErrorClass; reached: boolean } {
  if (err instanceof UpstreamError) return { errorClass: err.errorClass, reached: err.reached };
  if (err instanceof BlockedAddressError) return { errorClass: 'blocked', reached: false };
  const code = (err as { code?: string }).code ?? '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return { errorClass: 'timeout', reached: false };
  if (CONNECT_PHASE.has(code)) return { errorClass: 'connect', reached: false };
  // TLS handshake failures happen before the request is written.
  if (code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_') || /CERT|SELF_SIGNED/.test(code))
    return { errorClass: 'connect', reached: false };
  if (err instanceof AggregateError) {
    // Happy-eyeballs connect failures arrive as an AggregateError of per-address errors.
    const inner = err.errors.map(classifyError);
    if (inner.length && inner.every((c) => !c.reached))
      return inner.some((c) => c.errorClass === 'timeout')
        ? { errorClass: 'timeout', reached: false }
        : { errorClass: 'connect', reached: false };
  }
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError)
    return { errorClass: 'timeout', reached: true };
  if ((err as Error)?.name === 'TimeoutError' || code === 'ETIMEDOUT') return { errorClass: 'timeout', reached: true };
  // Anything else (reset, closed socket, protocol error) may have happened after the request was written.
  return { errorClass: 'connect', reached: true };
}

/** Error class recorded for a completed call with this upstream status (null for 1xx–3xx). */
export function classForStatus(status: number): ErrorClass | null {
  if (status >= 500) return 'upstream_5xx';
  if (status >= 400) return 'upstream_4xx';
  return null;
}

/**
 * The class of an answer whose body broke off after its head arrived, for both modes: a body
 * that went silent past its idle timeout, or a call past its deadline, is `timeout`; anything
 * else (a reset, a closed connection, a malformed chunk) is `stream_interrupted`.
 */
export function brokenBodyClass(err: unknown, deadlinePassed: boolean): ErrorClass {
  return deadlinePassed || err instanceof undiciErrors.BodyTimeoutError ? 'timeout' : 'stream_interrupted';
}
