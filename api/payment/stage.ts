// Payment stage (after policy, before forwarding). Until the x402 gate lands a priced agent
// cannot be invoked: it answers 402 and nothing is forwarded.
import { ApiError } from '../errors.ts';
import type { PaymentRecord, ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../app.ts';

export async function paymentStage(_deps: AppDeps, call: ProxyCall, _paymentHeader: string | undefined): Promise<PaymentRecord | null> {
  if (!call.agent.pricing) return null;
  throw new ApiError(402, 'payment required');
}
