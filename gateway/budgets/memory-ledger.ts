// The budget ledger in this process's memory (ledger.ts says what it keeps): without REDIS_URL,
// for one API process. The same steps as the Redis scripts (redis-ledger.ts), each synchronous,
// so each is atomic in this process. What it holds goes with the process: a restart starts every
// window from nothing (docs/API.md "Budgets" says to set REDIS_URL for anything else).
import {
  alertItem,
  crossed,
  fits,
  parseAlert,
  type BudgetLedger,
  type Claim,
  type QueuedAlert,
  type Usage,
} from './ledger.ts';

type Held = { keys: string[]; amount: bigint; calls: number; owner: string; at: number };
type Window = Usage & { expiresAt: number | null; alerted: Set<number> };

export function createMemoryLedger(now: () => number = Date.now): BudgetLedger {
  const windows = new Map<string, Window>();
  const reservations = new Map<string, Held>();
  const due = new Map<string, number>();
  const queued: string[] = [];
  const owners = new Map<string, number>();
  const keyOf = (c: Pick<Claim, 'budgetId' | 'windowStartMs'>) => `${c.budgetId}:${c.windowStartMs}`;
  const windowOf = (key: string): Window | undefined => {
    const w = windows.get(key);
    if (w && w.expiresAt !== null && w.expiresAt <= now()) {
      windows.delete(key);
      return undefined;
    }
    return w;
  };

  return {
    async reserve(claims, reservation, owner, dueAtMs) {
      const add = { amount: reservation.amount, calls: reservation.calls };
      const before = claims.map((c): Usage => {
        const w = windowOf(keyOf(c));
        return { amount: w?.amount ?? 0n, calls: w?.calls ?? 0 };
      });
      const refusing = claims.flatMap((c, i) => (c.hard && !fits(c, before[i], add) ? [i] : []));
      if (refusing.length > 0) return { admitted: false, refusing };
      if (reservations.has(reservation.invocationId)) return { admitted: true };
      claims.forEach((c, i) => {
        const key = keyOf(c);
        const w = windowOf(key) ?? { amount: 0n, calls: 0, expiresAt: null, alerted: new Set<number>() };
        const after = { amount: before[i].amount + add.amount, calls: before[i].calls + add.calls };
        w.amount = after.amount;
        w.calls = after.calls;
        w.expiresAt = c.keepMs === null ? null : now() + c.keepMs;
        windows.set(key, w);
        for (const t of crossed(c, before[i], after))
          if (!w.alerted.has(t)) {
            w.alerted.add(t);
            queued.push(alertItem(c.budgetId, c.windowStartMs, String(t)));
          }
      });
      reservations.set(reservation.invocationId, { keys: claims.map(keyOf), ...add, owner, at: now() });
      due.set(reservation.invocationId, dueAtMs);
      return { admitted: true };
    },
    async takeAndReserve(take, claims, reservation, owner, dueAtMs) {
      // Both in this process: no round trip to save.
      const decision = await take.limiter.take(take.buckets);
      return { decision, reserved: decision.allowed ? await this.reserve(claims, reservation, owner, dueAtMs) : null };
    },
    async settle(invocationId, counted) {
      const held = reservations.get(invocationId);
      due.delete(invocationId);
      if (!held) return false;
      for (const key of held.keys) {
        const w = windowOf(key);
        if (!w) continue;
        w.amount += counted.amount - held.amount;
        w.calls += counted.calls - held.calls;
      }
      reservations.delete(invocationId);
      return true;
    },
    async usage(list) {
      return list.map((c) => {
        const w = windowOf(keyOf(c));
        return { amount: w?.amount ?? 0n, calls: w?.calls ?? 0 };
      });
    },
    async due(nowMs, leaseUntilMs, limit) {
      const out = [];
      for (const [id, at] of due) {
        if (out.length >= limit) break;
        if (at > nowMs) continue;
        const held = reservations.get(id);
        if (!held) {
          due.delete(id);
          continue;
        }
        due.set(id, leaseUntilMs);
        out.push({ invocationId: id, owner: held.owner, reservedAtMs: held.at });
      }
      return out;
    },
    async settleAll(entries) {
      for (const { invocationId, counted } of entries) await this.settle(invocationId, counted);
    },
    async deferAll(invocationIds, atMs) {
      for (const id of invocationIds) if (due.has(id)) due.set(id, atMs);
    },
    async heartbeat(owner, ttlMs) {
      owners.set(owner, now() + ttlMs);
    },
    async alive(list) {
      return new Set(list.filter((o) => (owners.get(o) ?? 0) > now()));
    },
    async alerts(limit) {
      return queued
        .slice(0, limit)
        .map(parseAlert)
        .filter((a): a is QueuedAlert => a !== null);
    },
    async delivered(alert) {
      const i = queued.indexOf(alert.raw);
      if (i >= 0) queued.splice(i, 1);
    },
    async close() {
      windows.clear();
      reservations.clear();
    },
  };
}
