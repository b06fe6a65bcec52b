// A health check that public probes may call at any rate: it runs at most once per interval
// whatever the request rate (one in flight at a time, callers share it and its answer for the
// rest of the interval). A readiness endpoint that ran its database, Temporal or RPC check per
// request would let anyone multiply that load.
export function cachedProbe<T>(check: () => Promise<T>, intervalMs: number): () => Promise<T> {
  let last: { value: T; at: number } | undefined;
  let running: Promise<T> | undefined;
  return async () => {
    if (last && performance.now() - last.at < intervalMs) return last.value;
    running ??= check()
      .then((value) => {
        last = { value, at: performance.now() };
        return value;
      })
      .finally(() => (running = undefined));
    return running;
  };
}
