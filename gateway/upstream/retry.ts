// Retry timing: full-jitter exponential backoff (AWS Architecture Blog, "Exponential Backoff
// And Jitter"): sleep = random(0, min(cap, base · 2^attempt)). Full jitter spreads a herd of
// retrying callers evenly instead of in synchronized waves.
export type RetryOptions = {
  /** Attempts in all, the first included. */
  maxAttempts: number;
  baseMs: number;
  capMs: number;
};

export const DEFAULT_RETRY: RetryOptions = { maxAttempts: 4, baseMs: 100, capMs: 2_000 };

/** The wait before retry number `retry` (0 for the first retry). */
export function fullJitterDelay(retry: number, opts: RetryOptions, random: () => number = Math.random): number {
  return Math.floor(random() * Math.min(opts.capMs, opts.baseMs * 2 ** retry));
}

/** Retry-After as milliseconds (delta-seconds or an HTTP date); undefined when absent or unreadable. */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return undefined;
  if (/^\s*\d+\s*$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** Statuses that say "try again": rate limited or a gateway/availability failure upstream. */
export const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);
