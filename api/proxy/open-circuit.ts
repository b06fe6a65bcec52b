// A priced call whose upstream's circuit is open is refused before the payment stage: the
// call would be charged and then fail fast without reaching the upstream. What is open is what
// the breakers of this process, and with REDIS_URL of every replica and worker, have announced
// (gateway/upstream/open-circuits.ts).
import { ApiError } from '../errors.ts';
import { coarseMessage } from '../../gateway/upstream/errors.ts';
import { circuitKey } from '../../gateway/upstream/open-circuits.ts';
import { retryAfterSeconds } from '../../gateway/ratelimit/index.ts';
import type { ProxyCall } from './call.ts';
import type { ProxyServices } from './services.ts';

/** 503 `upstream unavailable`, Retry-After the seconds until the circuit may half-open (1..60). */
export async function refuseOpenCircuit(upstream: ProxyServices['upstream'], call: ProxyCall): Promise<void> {
  if (!call.agent.pricing || !call.agent.upstreamUrl) return;
  const openForMs = await upstream.breakers.circuits.openFor(circuitKey(call.agent.upstreamUrl, call.caller.tenantId));
  if (openForMs > 0)
    throw new ApiError(503, coarseMessage('circuit_open'), { 'Retry-After': String(retryAfterSeconds(openForMs)) });
}
