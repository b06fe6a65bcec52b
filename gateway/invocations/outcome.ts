// Outcome rule (docs/PROXY.md, "Outcome rule"): any upstream answer completes the call
// `succeeded` with its upstream_status (error_class upstream_4xx/upstream_5xx records a 4xx/5xx
// for analytics), except a retryable answer (429, 502, 503, 504) that is still the answer when
// the gateway stops trying: that is `failed`, with the upstream_status kept. Both the
// transactional activity and the streaming route complete rows by this one rule.
import { RETRYABLE_STATUSES } from '../upstream/retry.ts';
import { classForStatus, type ErrorClass } from '../upstream/errors.ts';

/** The v1 contract's status for a call the upstream answered with `upstreamStatus`. */
function outcomeStatus(upstreamStatus: number): 'succeeded' | 'failed' {
  return RETRYABLE_STATUSES.has(upstreamStatus) ? 'failed' : 'succeeded';
}

/**
 * A call the upstream answered: `failure` when its body did not pass whole (the call failed with
 * that class, its upstream status kept), else the outcome rule above.
 */
export function answeredOutcome(
  upstreamStatus: number,
  failure: ErrorClass | null,
): { status: 'succeeded' | 'failed'; upstreamStatus: number; errorClass: ErrorClass | null } {
  if (failure) return { status: 'failed', upstreamStatus, errorClass: failure };
  return { status: outcomeStatus(upstreamStatus), upstreamStatus, errorClass: classForStatus(upstreamStatus) };
}
