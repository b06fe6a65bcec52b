// The transactional endpoint's start-backlog place (api/proxy/start-backlog.ts), reserved
// before payment: a call past the bound is refused (503, Retry-After) before anything is paid
// or written. Admission gives the place back when a later stage refuses the call; the endpoint,
// when the call is not accepted or once its start is known.
import type { BacklogPlace } from '../../proxy/start-backlog.ts';
import type { ProxyCall } from '../../proxy/call.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';

export function reserveBacklogPlace(parts: Pick<ProxyParts, 'startBacklog'>, call: ProxyCall): BacklogPlace {
  return parts.startBacklog.reserve(call.caller.tenantId);
}
