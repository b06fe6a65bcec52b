// Waiting on a condition instead of for a fixed time: a fixed sleep is either longer than the
// machine needs (a slow suite) or shorter than a loaded machine needs (a flaky one).

/** What a truthy value of T can be: a condition written `ok && value` returns the value. */
type Truthy<T> = Exclude<NonNullable<T>, false | 0 | ''>;

/**
 * Polls `condition` (every `everyMs`, default 20 ms) until it returns something truthy, and
 * returns that; fails naming `what` once `timeoutMs` (default 10 s) has passed, with what
 * `state` says of the thing waited on at that moment when given (the count it had reached, the
 * status it was left in).
 */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  {
    timeoutMs = 10_000,
    everyMs = 20,
    what = 'a condition',
    state,
  }: { timeoutMs?: number; everyMs?: number; what?: string; state?: () => unknown } = {},
): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as Truthy<T>;
    if (Date.now() > deadline) {
      const seen = state ? `: ${String(await state())}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${seen}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * `work`'s value, or `fallback` once `ms` have passed without it: a bound on how long a wait may
 * hold the run (a stop, a diagnostic), not a pause; the timer is cleared as soon as `work` settles.
 */
export async function within<T, F>(work: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<F>((resolve) => (timer = setTimeout(resolve, ms, fallback)))]);
  } finally {
    clearTimeout(timer);
  }
}
