// Reading an invocation the gateway has just handed out. A streaming call's id leaves in its
// response headers while its row is still queued (gateway/invocations/stream-records.ts writes it within a few ms, off the
// call's path), on this replica or another. So a read of an id that is not found, but was
// minted moments ago (its UUIDv7 carries the time), looks again for a short while before its
// 404: an id the gateway handed out is never answered 404 because its row is not written yet.
// Ids minted longer ago, or in the future, are answered at once. The waits are bounded per
// tenant, so ids made up with a fresh timestamp cannot hold many requests open.
import { mintedAt } from '../../lib/ids.ts';

/** An id minted this recently may still have its row on the way. */
const RECENT_ID_MS = 30_000;
/** The longest a read waits for such a row. */
const RECENT_READ_WAIT_MS = 2_000;
/** Clock skew between replicas tolerated for an id minted "in the future". */
const SKEW_MS = 2_000;
const PAUSES_MS = [5, 10, 20, 40, 80, 160, 320, 500];
const MAX_WAITING_PER_TENANT = 32;

export type RecentReads = {
  /** `read`'s result; when it finds nothing for a recent id, `read` again until found or the wait is over. */
  find<T>(tenantId: string, id: string, read: () => Promise<T | null>): Promise<T | null>;
};

export function createRecentReads(): RecentReads {
  const waiting = new Map<string, number>();
  return {
    async find(tenantId, id, read) {
      const found = await read();
      if (found) return found;
      const age = Date.now() - mintedAt(id);
      const count = waiting.get(tenantId) ?? 0;
      if (age > RECENT_ID_MS || age < -SKEW_MS || count >= MAX_WAITING_PER_TENANT) return null;
      waiting.set(tenantId, count + 1);
      try {
        const until = Date.now() + RECENT_READ_WAIT_MS;
        for (let i = 0; Date.now() < until; i++) {
          await new Promise((r) =>
            setTimeout(r, Math.min(PAUSES_MS[Math.min(i, PAUSES_MS.length - 1)], until - Date.now())),
          );
          const again = await read();
          if (again) return again;
        }
        return null;
      } finally {
        const left = (waiting.get(tenantId) ?? 1) - 1;
        if (left > 0) waiting.set(tenantId, left);
        else waiting.delete(tenantId);
      }
    },
  };
}
