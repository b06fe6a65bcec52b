// What each budget's window has used, and every call's reservation against it: in Redis, shared
// by every replica (redis-ledger.ts), else in this process's memory (memory-ledger.ts). A call is
// admitted by one atomic step over every budget it matches (`reserve`): either some hard budget
// would go past its limit and nothing is written, or the call's amount and its one call are
// added to every matched window at once and remembered as the call's reservation. The
// reservation is later trued up to what the call actually counts, or given back (`settle`), by
// whoever learns it first: the admitting process when a later stage refuses the call, else the
// reconciliation round (reconcile.ts), from the call's invocation row. A reservation is due for
// reconciliation from the moment it is made (`due`), so one left behind by a process that died
// is trued up from the row, or given back when there is none, by any replica: it never leaves a
// budget short. Crossing an alert threshold queues the alert (`alerts`) in the same step, once
// per threshold and window. `takeAndReserve` is the same step preceded by the call's rate-limit
// take, for a call whose budget facts its door knows: with Redis one script, so the admission
// makes one round trip where it would make two; a call the limiter refuses reserves nothing.
import type { Bucket, Decision, RateLimiter } from '../ratelimit/limiter.ts';

/** One matched budget's window, as the reservation step takes it. */
export type Claim = {
  /** The window's counter: the budget and its window's start. */
  budgetId: string;
  windowStartMs: number;
  /** Null when the budget caps only calls (or only the amount). */
  limitAmount: bigint | null;
  limitCalls: number | null;
  hard: boolean;
  /** Sorted, each in (0, 1]; empty for a budget without alerts. */
  thresholds: number[];
  /** How long the window's counter is kept (until its window has ended and a day more); null: forever (`total`). */
  keepMs: number | null;
};

export type Usage = { amount: bigint; calls: number };

export type Reservation = { invocationId: string; amount: bigint; calls: number };

export type ReserveResult =
  | { admitted: true }
  /** The indexes (into the claims) of every hard budget the call would take past its limit. */
  | { admitted: false; refusing: number[] };

/** The tokens a call takes: its buckets, from its limiter (gateway/ratelimit/). */
export type TokenTake = { limiter: RateLimiter; buckets: Bucket[] };

/** A reservation due for reconciliation: whose it is and when it was made. */
export type DueReservation = { invocationId: string; owner: string; reservedAtMs: number };

/** A threshold crossed: one alert to deliver. */
export type QueuedAlert = { budgetId: string; windowStartMs: number; threshold: number; raw: string };

export interface BudgetLedger {
  /** Reserves `reservation` against every claim, all or nothing; `owner` is this process (liveness). */
  reserve(claims: Claim[], reservation: Reservation, owner: string, dueAtMs: number): Promise<ReserveResult>;
  /** The call's rate-limit take, then (only when it is allowed) `reserve`, in one step where the ledger can. */
  takeAndReserve(
    take: TokenTake,
    claims: Claim[],
    reservation: Reservation,
    owner: string,
    dueAtMs: number,
  ): Promise<{ decision: Decision; reserved: ReserveResult | null }>;
  /** Trues the reservation up to what the call counts (0, 0 gives it back); false when it was settled already. */
  settle(invocationId: string, counted: Usage): Promise<boolean>;
  /** What each window has used, reservations included. */
  usage(windows: Array<Pick<Claim, 'budgetId' | 'windowStartMs'>>): Promise<Usage[]>;
  /** Up to `limit` reservations due by `nowMs`, each leased to the caller until `leaseUntilMs`. */
  due(nowMs: number, leaseUntilMs: number, limit: number): Promise<DueReservation[]>;
  /** `settle` of many at once (one step per reservation, one round trip for all). */
  settleAll(entries: Array<{ invocationId: string; counted: Usage }>): Promise<void>;
  /** Looks at these reservations again at `atMs` (nothing for one settled meanwhile). */
  deferAll(invocationIds: string[], atMs: number): Promise<void>;
  /** Says this process is alive for `ttlMs`. */
  heartbeat(owner: string, ttlMs: number): Promise<void>;
  /** Which of these owners are alive. */
  alive(owners: string[]): Promise<Set<string>>;
  /** Queued alerts, oldest first; `delivered` once its delivery has started. */
  alerts(limit: number): Promise<QueuedAlert[]>;
  delivered(alert: QueuedAlert): Promise<void>;
  close(): Promise<void>;
}

export const alertItem = (budgetId: string, windowStartMs: number, threshold: string) =>
  `${budgetId}|${windowStartMs}|${threshold}`;

export function parseAlert(raw: string): QueuedAlert | null {
  const [budgetId, start, threshold] = raw.split('|');
  const windowStartMs = Number(start);
  const t = Number(threshold);
  if (!budgetId || !Number.isFinite(windowStartMs) || !(t > 0 && t <= 1)) return null;
  return { budgetId, windowStartMs, threshold: t, raw };
}

/** Whether `used` plus `add` stays within the claim's limits. */
export function fits(claim: Pick<Claim, 'limitAmount' | 'limitCalls'>, used: Usage, add: Usage): boolean {
  if (claim.limitAmount !== null && used.amount + add.amount > claim.limitAmount) return false;
  if (claim.limitCalls !== null && used.calls + add.calls > claim.limitCalls) return false;
  return true;
}

/** The share of its limit a window has used: the larger of amount and calls. */
function usedShare(claim: Pick<Claim, 'limitAmount' | 'limitCalls'>, used: Usage): number {
  let share = 0;
  if (claim.limitAmount !== null && claim.limitAmount > 0n)
    share = Math.max(share, Number(used.amount) / Number(claim.limitAmount));
  if (claim.limitCalls !== null && claim.limitCalls > 0) share = Math.max(share, used.calls / claim.limitCalls);
  return share;
}

/** The thresholds a step from `before` to `after` crosses (reached now, not before). */
export function crossed(claim: Claim, before: Usage, after: Usage): number[] {
  const from = usedShare(claim, before);
  const to = usedShare(claim, after);
  return claim.thresholds.filter((t) => from < t && to >= t);
}
