// Waiting on a condition instead of for a fixed time: a fixed sleep is either longer than the
// machine needs (a slow suite) or shorter than a loaded machine needs (a flaky one).

/**
 * Polls `condition` (every `everyMs`, default 20 ms) until it returns something truthy, and
 * returns that; fails naming `what` once `timeoutMs` (default 10 s) has passed.
 */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  {
    timeoutMs = 10_000,
    everyMs = 20,
    what = 'a condition',
  }: { timeoutMs?: number; everyMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
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
