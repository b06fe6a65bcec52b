// The bound on accepted transactional calls whose workflow start is not yet known. A call is
// accepted once its row (its intent to start) commits, before its workflow starts; while
// Temporal is unreachable such calls wait for the start relay. A place is reserved before the
// payment stage, so a call past the bound is refused (503, Retry-After) before anything is paid
// or written, and given back when the call is not accepted or once its start is known: made by
// this process, or found made by a relay (reconcile).
import { ApiError } from '../errors.ts';

export type BacklogPlace = {
  /** The accepted call's id, for reconcile() to find. */
  bind(invocationId: string): void;
  /** Gives the place back; safe to call twice. */
  release(): void;
};

export type StartBacklog = {
  /** Reserves a place for a call about to be accepted; throws 503 past the process's or the tenant's bound. */
  reserve(tenantId: string): BacklogPlace;
  /** Accepted calls of this process whose start is not yet known. */
  size(): number;
  limit: number;
  /** The accepted calls still held, for the relay to check. */
  held(): string[];
  /** Gives back the places of these calls (their workflows are known to have started). */
  releaseStarted(invocationIds: string[]): void;
};

export function createStartBacklog(limits: { process: number; tenant: number }): StartBacklog {
  let processHeld = 0;
  const tenantHeld = new Map<string, number>();
  const byId = new Map<string, BacklogPlace>();
  const full = () => new ApiError(503, 'service temporarily unavailable', { 'Retry-After': '1' });

  return {
    limit: limits.process,
    size: () => processHeld,
    held: () => [...byId.keys()],
    releaseStarted(ids) {
      for (const id of ids) byId.get(id)?.release();
    },
    reserve(tenantId) {
      const tenantNow = tenantHeld.get(tenantId) ?? 0;
      if (processHeld >= limits.process || tenantNow >= limits.tenant) throw full();
      processHeld++;
      tenantHeld.set(tenantId, tenantNow + 1);
      let held = true;
      let boundId: string | undefined;
      const place: BacklogPlace = {
        bind(invocationId) {
          boundId = invocationId;
          if (held) byId.set(invocationId, place);
        },
        release() {
          if (!held) return;
          held = false;
          processHeld--;
          const left = (tenantHeld.get(tenantId) ?? 1) - 1;
          if (left > 0) tenantHeld.set(tenantId, left);
          else tenantHeld.delete(tenantId);
          if (boundId) byId.delete(boundId);
        },
      };
      return place;
    },
  };
}
