// The budget check of a call's admission (api/admission/stages/budget.ts is its door): every
// budget of the tenant whose scope matches the call, reserved in one step (ledger.ts), before
// any payment is verified, bound or settled. A call a hard budget cannot take is refused naming
// the strictest refusing budget: the one whose window resets last (a `total` one never does),
// since the call cannot pass before every refusing window has reset; its Retry-After is that
// wait. What a call reserves is what it may be charged: the price of an `exact` call, the
// maximum of a metered (`upto`) or channel-paid one (their charge is at most that), nothing for
// a free call; and one call. The reservation is trued up later (reconcile.ts) or given back.
import { budgetRefusals } from '../metrics.ts';
import type { Budget } from './entity.ts';
import type { Decision } from '../ratelimit/limiter.ts';
import type { BudgetLedger, Claim, TokenTake } from './ledger.ts';
import type { BudgetReads } from './reads.ts';
import { scopeMatches, needsPayer, type ScopeFacts } from './scope.ts';
import { secondsUntilReset, windowAt } from './windows.ts';

/** A window's counter outlives its window by a day: late true-ups still land, then it goes. */
const KEEP_AFTER_RESET_MS = 24 * 3_600_000;

/** How soon a new reservation is first reconciled: by then most calls have their row. */
const FIRST_LOOK_MS = 1_000;

export class BudgetExceeded extends Error {
  readonly budgetId: string;
  /** Seconds until the budget's window resets; null for a `total` budget (it never does). */
  readonly retryAfterSeconds: number | null;
  constructor(budgetId: string, retryAfterSeconds: number | null) {
    super('budget exceeded');
    this.name = 'BudgetExceeded';
    this.budgetId = budgetId;
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** The ledger could not be asked: a hard budget is not taken on trust (the door answers 503). */
export class BudgetUnavailable extends Error {
  constructor() {
    super('budgets cannot be checked now');
    this.name = 'BudgetUnavailable';
  }
}

type BudgetCall = ScopeFacts & {
  tenantId: string;
  invocationId: string;
  /** What the call may be charged, in base units (0 for a free call). */
  amount: bigint;
};

/** A call's reservation, held until it is trued up; `release` gives it back (a refusal after the check). */
export type BudgetHold = { release(): Promise<void> };

/** The claim of one budget's current window. */
function claimOf(budget: Budget, now: Date): Claim & { resetsAt: Date | null } {
  const span = windowAt(budget.timeWindow, now, budget.createdAt);
  return {
    budgetId: budget.id,
    windowStartMs: span.start.getTime(),
    limitAmount: budget.limitAmount == null ? null : BigInt(budget.limitAmount),
    limitCalls: budget.limitCalls == null ? null : Number(budget.limitCalls),
    hard: budget.mode === 'hard',
    thresholds: budget.webhookUrl ? (budget.alertThresholds ?? []) : [],
    keepMs: span.resetsAt ? span.resetsAt.getTime() - now.getTime() + KEEP_AFTER_RESET_MS : null,
    resetsAt: span.resetsAt,
  };
}

/** Counts a refusal as it is told (metrics: refusals by budget); a door's verdict is told at the budget stage. */
export function told(refusal: BudgetExceeded): BudgetExceeded {
  budgetRefusals.inc({ budget_id: refusal.budgetId });
  return refusal;
}

/** What the door's step decided of a call's budgets: its hold (null: none matched), or its refusal, told at the budget stage. */
export type DoorVerdict = { hold: BudgetHold | null } | { refused: BudgetExceeded | BudgetUnavailable };

export type BudgetGate = {
  /** Whether any of the tenant's budgets needs a call's payer to be matched. */
  needsPayer(tenantId: string): Promise<boolean>;
  /** Reserves the call against its budgets: null when none matches; throws BudgetExceeded, BudgetUnavailable. */
  admit(call: BudgetCall): Promise<BudgetHold | null>;
  /**
   * The door's step for a call whose budget facts are known there: its rate-limit take and, if
   * the take is allowed and a budget matches, its reservation, in one step of the ledger (one
   * Redis round trip). A call the limiter refuses reserves nothing; a budget's refusal leaves the
   * tokens taken, as the budget stage's own refusal does. `budget` null: nothing decided (a
   * payer-scoped budget of the tenant needs the payment): the budget stage reserves the call.
   */
  takeAndAdmit(call: BudgetCall, take: TokenTake): Promise<{ decision: Decision; budget: DoorVerdict | null }>;
};

export function createBudgetGate(deps: {
  reads: BudgetReads;
  ledger: BudgetLedger;
  /** This process, as its reservations name it (reconcile.ts asks whether it is alive). */
  owner: string;
  onError?: (err: Error) => void;
}): BudgetGate {
  const { reads, ledger, owner } = deps;

  /** The call's claims, and the refusal naming the strictest of some; null when no budget matches. */
  function claimsOf(budgets: Budget[], call: BudgetCall) {
    if (budgets.length === 0) return null;
    const matched = budgets.filter((b) => scopeMatches(b.scope, call));
    if (matched.length === 0) return null;
    const now = new Date();
    const claims = matched.map((b) => claimOf(b, now));
    const refuse = (refusing: number[]) => {
      // The strictest: the window that resets last (never, for `total`).
      const last = (i: number) => claims[i].resetsAt?.getTime() ?? Infinity;
      const strictest = refusing.reduce((a, b) => (last(b) > last(a) ? b : a));
      const claim = claims[strictest];
      const span = { start: new Date(claim.windowStartMs), resetsAt: claim.resetsAt };
      return new BudgetExceeded(claim.budgetId, secondsUntilReset(span, now));
    };
    // A call whose amount alone is past a hard limit never fits (and never reaches the ledger's integers).
    const past = claims.flatMap((c, i) => (c.hard && c.limitAmount !== null && call.amount > c.limitAmount ? [i] : []));
    const reservation = { invocationId: call.invocationId, amount: call.amount, calls: 1 };
    return { claims, refuse, past, reservation, dueAtMs: now.getTime() + FIRST_LOOK_MS };
  }

  /** The ledger could not answer: a hard budget is not taken on trust; soft ones pass. */
  function unavailable(claims: Claim[], err: Error): BudgetUnavailable | null {
    deps.onError?.(err);
    return claims.some((c) => c.hard) ? new BudgetUnavailable() : null;
  }

  function holdOf(invocationId: string): BudgetHold {
    let released = false;
    return {
      async release() {
        if (released) return;
        released = true;
        // Not given back now (Redis away): the reconciliation round gives it back from the row.
        await ledger.settle(invocationId, { amount: 0n, calls: 0 }).catch((err: Error) => deps.onError?.(err));
      },
    };
  }

  return {
    async needsPayer(tenantId) {
      return (await reads.of(tenantId)).some((b) => needsPayer(b.scope));
    },
    async admit(call) {
      const step = claimsOf(await reads.of(call.tenantId), call);
      if (!step) return null;
      if (step.past.length > 0) throw told(step.refuse(step.past));
      let result;
      try {
        result = await ledger.reserve(step.claims, step.reservation, owner, step.dueAtMs);
      } catch (err) {
        const refusal = unavailable(step.claims, err as Error);
        if (refusal) throw refusal;
        return null;
      }
      if (!result.admitted) throw told(step.refuse(result.refusing));
      return holdOf(call.invocationId);
    },
    async takeAndAdmit(call, take) {
      const budgets = await reads.of(call.tenantId);
      // A payer-scoped budget needs the call's payment, read after the door: the budget stage reserves.
      if (budgets.some((b) => needsPayer(b.scope)))
        return { decision: await take.limiter.take(take.buckets), budget: null };
      const step = claimsOf(budgets, call);
      if (!step) return { decision: await take.limiter.take(take.buckets), budget: { hold: null } };
      if (step.past.length > 0)
        return { decision: await take.limiter.take(take.buckets), budget: { refused: step.refuse(step.past) } };
      let answer;
      try {
        answer = await ledger.takeAndReserve(take, step.claims, step.reservation, owner, step.dueAtMs);
      } catch (err) {
        // The rate limit fails open, as the limiter's own take does when Redis is away.
        const refusal = unavailable(step.claims, err as Error);
        return { decision: { allowed: true }, budget: refusal ? { refused: refusal } : { hold: null } };
      }
      const { decision, reserved } = answer;
      if (!reserved) return { decision, budget: { hold: null } };
      if (!reserved.admitted) return { decision, budget: { refused: step.refuse(reserved.refusing) } };
      return { decision, budget: { hold: holdOf(call.invocationId) } };
    },
  };
}
