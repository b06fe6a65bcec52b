// How many request-body bytes the process holds at once, in all and per tenant. A body the
// gateway reads itself sits in memory until its call is accepted; without a bound, one tenant
// sending many 32 MiB bodies at once could exhaust the process for every tenant. Past the
// process bound the call is 503, past the tenant's 429, both with Retry-After, and nothing read
// so far is kept.
import { ApiError } from '../errors.ts';
import type { BodyBudgetLimits } from '../../gateway/config.ts';

export type BodyReservation = {
  /** Takes `n` more bytes (a chunk as it arrives); throws 503 or 429 when a bound would be passed. */
  take(n: number): void;
  /** Gives back everything taken; safe to call twice. */
  release(): void;
};

export function createBodyBudget(limits: BodyBudgetLimits) {
  let processHeld = 0;
  const tenantHeld = new Map<string, number>();
  return {
    get held(): number {
      return processHeld;
    },
    open(tenantId: string): BodyReservation {
      let mine = 0;
      return {
        take(n) {
          const tenantNow = tenantHeld.get(tenantId) ?? 0;
          if (processHeld + n > limits.processBytes)
            throw new ApiError(503, 'too many request bodies in flight; retry shortly', { 'Retry-After': '1' });
          if (tenantNow + n > limits.tenantBytes)
            throw new ApiError(429, "too many of this tenant's request bodies in flight", { 'Retry-After': '1' });
          processHeld += n;
          tenantHeld.set(tenantId, tenantNow + n);
          mine += n;
        },
        release() {
          if (mine === 0) return;
          processHeld -= mine;
          const left = (tenantHeld.get(tenantId) ?? 0) - mine;
          if (left > 0) tenantHeld.set(tenantId, left);
          else tenantHeld.delete(tenantId);
          mine = 0;
        },
      };
    },
  };
}

export type BodyBudget = ReturnType<typeof createBodyBudget>;
