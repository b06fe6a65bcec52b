// A budget's window: the calendar hour, day, ISO week (from Monday) or month in UTC that an
// instant falls in, or `total` (one window from the budget's creation, never reset). A window
// is named by its start, so what it used is counted under that name and a new window starts
// from nothing without anyone resetting it.

export const WINDOWS = ['hour', 'day', 'week', 'month', 'total'] as const;
export type BudgetWindow = (typeof WINDOWS)[number];

export type WindowSpan = {
  start: Date;
  /** When the next window starts; null for `total`. */
  resetsAt: Date | null;
};

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** The window of kind `window` that `at` falls in; `total` starts at `since` (the budget's creation). */
export function windowAt(window: BudgetWindow, at: Date, since: Date): WindowSpan {
  const y = at.getUTCFullYear();
  const m = at.getUTCMonth();
  const d = at.getUTCDate();
  switch (window) {
    case 'hour': {
      const start = Date.UTC(y, m, d, at.getUTCHours());
      return { start: new Date(start), resetsAt: new Date(start + HOUR_MS) };
    }
    case 'day': {
      const start = Date.UTC(y, m, d);
      return { start: new Date(start), resetsAt: new Date(start + DAY_MS) };
    }
    case 'week': {
      // getUTCDay: Sunday 0 … Saturday 6; the ISO week starts on Monday.
      const sinceMonday = (at.getUTCDay() + 6) % 7;
      const start = Date.UTC(y, m, d - sinceMonday);
      return { start: new Date(start), resetsAt: new Date(start + 7 * DAY_MS) };
    }
    case 'month':
      // Date.UTC rolls month 12 over into January of the next year.
      return { start: new Date(Date.UTC(y, m, 1)), resetsAt: new Date(Date.UTC(y, m + 1, 1)) };
    case 'total':
      return { start: since, resetsAt: null };
  }
}

/** Whole seconds until the window resets, at least 1 (a Retry-After); null for `total`. */
export function secondsUntilReset(span: WindowSpan, now: Date): number | null {
  if (!span.resetsAt) return null;
  return Math.max(1, Math.ceil((span.resetsAt.getTime() - now.getTime()) / 1000));
}
