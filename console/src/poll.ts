// Data that refreshes while the page is open: fetched at once, then every `everyMs` while the tab
// is visible; a 429 waits what its Retry-After says. A newer fetch aborts an older one.
import { useEffect, useRef, useState } from 'preact/hooks';
import { HttpError } from './api.ts';

export type Polled<T> = { data?: T; error?: HttpError | Error; loading: boolean; at?: Date; refresh(): void };

export function usePoll<T>(fetcher: (signal: AbortSignal) => Promise<T>, keys: unknown[], everyMs: number): Polled<T> {
  const [state, setState] = useState<Omit<Polled<T>, 'refresh'>>({ loading: true });
  const [tick, setTick] = useState(0);
  const latest = useRef(fetcher);
  latest.current = fetcher;

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let controller: AbortController | undefined;
    const schedule = (ms: number) => {
      clearTimeout(timer);
      if (!stopped) timer = setTimeout(run, ms);
    };
    async function run(): Promise<void> {
      if (document.hidden) return schedule(everyMs);
      controller?.abort();
      controller = new AbortController();
      setState((s) => ({ ...s, loading: true }));
      try {
        const data = await latest.current(controller.signal);
        if (stopped) return;
        setState({ data, loading: false, at: new Date() });
        schedule(everyMs);
      } catch (err) {
        if (stopped || (err as Error).name === 'AbortError') return;
        const retry = err instanceof HttpError && err.retryAfterSeconds ? err.retryAfterSeconds * 1000 : everyMs;
        setState((s) => ({ ...s, error: err as Error, loading: false }));
        // A refused token ends the polling: the app is back at sign-in.
        if (!(err instanceof HttpError && err.status === 401)) schedule(Math.max(retry, 1000));
      }
    }
    const onVisible = () => {
      if (!document.hidden) schedule(0);
    };
    document.addEventListener('visibilitychange', onVisible);
    setState({ loading: true });
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
      controller?.abort();
      document.removeEventListener('visibilitychange', onVisible);
    };
  }, [...keys, tick, everyMs]);

  return { ...state, refresh: () => setTick((t) => t + 1) };
}
