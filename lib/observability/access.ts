// Where an answered request is recorded: the HTTP metrics and the access line
// (docs/OBSERVABILITY.md, "Logs"). `each` does both as the request ends; `batched` queues the
// request's few figures and records them together, off the request's path, at most
// FLUSH_MS later (and before every scrape, so a scrape never misses an answer); `sampled` does
// what `batched` does but writes the access line of one answer in `sampleEvery`. Metrics are
// always complete; an answer of 500 or above is always logged, at once.
import type { Logger } from '../log.ts';
import { httpDuration, httpRequests } from './metrics.ts';

export type AccessLogSettings = { mode: 'each' | 'batched' | 'sampled'; sampleEvery: number };

export type AccessFacts = {
  requestId: string;
  invocationId: string | undefined;
  traceId: string | undefined;
  method: string;
  route: string;
  status: number;
  seconds: number;
};

/** How long a queued answer may wait to be recorded, and how many may wait. */
const FLUSH_MS = 1_000;
const MAX_QUEUED = 4_096;

// Recorders with answers queued, flushed before every scrape (lib/observability/http.ts).
const pending = new Set<() => void>();

/** Records every queued answer now: before a scrape, and when the process stops. */
export function flushAccessRecords(): void {
  for (const flush of [...pending]) flush();
}

function writeLine(log: Logger, f: AccessFacts): void {
  if (f.route === '/metrics' || !log.isLevelEnabled('info')) return;
  log.info(
    {
      requestId: f.requestId,
      invocationId: f.invocationId,
      traceId: f.traceId,
      method: f.method,
      route: f.route,
      status: f.status,
      durationMs: Math.round(f.seconds * 1000),
    },
    'request',
  );
}

export function createAccessRecorder(
  service: string,
  log: Logger,
  settings: AccessLogSettings = { mode: 'each', sampleEvery: 1 },
): (facts: AccessFacts) => void {
  const countNow = (f: AccessFacts) => {
    const labels = { service, method: f.method, route: f.route, status: String(f.status) };
    httpRequests.inc(labels);
    httpDuration.observe(labels, f.seconds);
  };
  if (settings.mode === 'each')
    return (f) => {
      countNow(f);
      writeLine(log, f);
    };

  // Answers of one label set are counted with one increment, their durations on one child.
  let queue: AccessFacts[] = [];
  let timer: NodeJS.Timeout | null = null;
  let seen = 0;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    pending.delete(flush);
    const facts = queue;
    queue = [];
    const groups = new Map<string, AccessFacts[]>();
    for (const f of facts) {
      const key = `${f.method} ${f.route} ${f.status}`;
      const group = groups.get(key);
      if (group) group.push(f);
      else groups.set(key, [f]);
    }
    for (const group of groups.values()) {
      const { method, route, status } = group[0];
      const labels = { service, method, route, status: String(status) };
      httpRequests.inc(labels, group.length);
      const durations = httpDuration.labels(labels);
      for (const f of group) durations.observe(f.seconds);
    }
    for (const f of facts)
      if (f.status < 500 && (settings.mode === 'batched' || ++seen % settings.sampleEvery === 0)) writeLine(log, f);
  };
  return (f) => {
    if (f.status >= 500) {
      countNow(f);
      writeLine(log, f);
      return;
    }
    queue.push(f);
    if (queue.length >= MAX_QUEUED) return flush();
    if (timer) return;
    pending.add(flush);
    timer = setTimeout(flush, FLUSH_MS).unref();
  };
}
