// Outcome rule (docs/PROXY.md, "Outcome rule"): any upstream answer completes the call
// `succeeded` with its upstream_status (error_class upstream_4xx/upstream_5xx records a 4xx/5xx
// for analytics), except a retryable answer (429, 502, 503, 504) that is still the answer when
// the gateway stops trying: that is `failed`, with the upstream_status kept. Both the
// transactional activity and the streaming route complete rows by this one rule.
import { RETRYABLE_STATUSES } from '../upstream/retry.ts';

/** The v1 contract's status for a call the upstream answered with `upstreamStatus`. */
export function outcomeStatus(upstreamStatus: number): 'succeeded' | 'failed' {
  return RETRYABLE_STATUSES.has(upstreamStatus) ? 'failed' : 'succeeded';
}
