// A priced call the gateway already knows will fail is refused before the payment stage: it
// would be charged and then fail without reaching the upstream. Known without the upstream:
// - an upstream address the SSRF guard refuses on its face (a literal internal address or
//   localhost the allow-list no longer admits; a name is only judged once resolved, at connect):
//   502 `upstream unreachable`, the streaming endpoint's answer for a blocked call;
// - an open circuit for the call's tenant and upstream origin, as announced by the breakers of
//   this process and, with REDIS_URL, of every replica and worker
//   (gateway/upstream/open-circuits.ts): 503 `upstream unavailable` with Retry-After, the
//   seconds until the circuit may half-open (1..60).
import { ApiError } from '../../errors.ts';
import { coarseMessage } from '../../proxy/upstream-failure.ts';
import { circuitKey } from '../../../gateway/upstream/open-circuits.ts';
import { isAllowedUpstream } from '../../../gateway/upstream/ssrf.ts';
import { retryAfterSeconds } from '../../../gateway/ratelimit/index.ts';
import type { ProxyCall } from '../../proxy/call.ts';
import { isCharged } from '../../../gateway/payment/pricing.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';
import type { AppDeps } from '../../deps.ts';

export async function refuseKnownUpstreamFailure(
  deps: AppDeps,
  upstream: ProxyParts['upstream'],
  call: ProxyCall,
): Promise<void> {
  const url = call.agent.upstreamUrl;
  // Free calls are not refused here: their breaker fails them fast, with nothing to lose.
  if (!isCharged(call.price) || !url) return;
  if (!isAllowedUpstream(url, deps.config.upstream.allow)) throw new ApiError(502, coarseMessage('blocked'));
  const openForMs = await upstream.breakers.circuits.openFor(circuitKey(url, call.caller.tenantId));
  if (openForMs > 0)
    throw new ApiError(503, coarseMessage('circuit_open'), { 'Retry-After': String(retryAfterSeconds(openForMs)) });
}
