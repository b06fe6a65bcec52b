// The credential stage, after policy and before payment: an agent's credential that cannot be
// resolved refuses a priced call before the payer is charged (502 `credential`), which the
// upstream call would otherwise fail after the payer paid. The endpoint says what it needs
// (endpoint.ts): the headers themselves, or only the check.
import { ApiError } from '../../errors.ts';
import { coarseMessage } from '../../proxy/upstream-failure.ts';
import { isCharged } from '../../../gateway/payment/pricing.ts';
import type { Endpoint } from '../endpoint.ts';
import type { ProxyCall } from '../../proxy/call.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';

const unresolved = () => new ApiError(502, coarseMessage('credential'));

/**
 * `resolve`: the credential headers, resolved once for the call; null when a free call's could
 * not be (the streaming endpoint records it as `credential`). `check-if-charged`: nothing (the
 * workflow resolves it); a charged call's credential is resolved only to be checked.
 */
export async function credentialStage(
  parts: Pick<ProxyParts, 'credentials'>,
  call: ProxyCall,
  need: Endpoint['credential'],
): Promise<Record<string, string> | null | undefined> {
  const { tenantId } = call.caller;
  const ref = call.agent.credentialRef;
  if (need === 'check-if-charged') {
    if (isCharged(call.price) && ref)
      await parts.credentials.headersFor(tenantId, ref).catch(() => {
        throw unresolved();
      });
    return undefined;
  }
  try {
    return await parts.credentials.headersFor(tenantId, ref);
  } catch {
    if (isCharged(call.price)) throw unresolved();
    return null;
  }
}
