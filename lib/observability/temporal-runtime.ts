// The Temporal SDK's own telemetry in a worker process: `Runtime.install`, once, before the
// process's first NativeConnection. Its logs (the TypeScript side's and, forwarded, the Rust
// core's) go through the process's pino logger at LOG_LEVEL; its core metrics (temporal_*:
// task slots, poll and schedule-to-start latencies, workflow and activity outcomes) are served
// on the process's own /metrics listener, after prom-client's.
//
// Metrics: core's Prometheus exporter bound to a loopback port of its own, whose text the
// /metrics handler appends. It is the SDK's stable exporter and gives Temporal's documented
// metric names and histograms as-is; the buffered exporter is experimental and would have us
// re-aggregate every update into prom-client with label sets we cannot know in advance.
import { createServer } from 'node:net';
import { Runtime, type LogLevel, type Logger as SdkLogger, type LogMetadata } from '@temporalio/worker';
import { handleWhen, retry } from 'cockatiel';
import type { Logger } from '../log.ts';

/** Scrapes of core's exporter give up after this: /metrics still answers with the process's own. */
const SCRAPE_TIMEOUT_MS = 2_000;

const PINO_LEVEL = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' } as const;
const SDK_LEVEL: Record<string, LogLevel> = {
  trace: 'TRACE',
  debug: 'DEBUG',
  info: 'INFO',
  warn: 'WARN',
  error: 'ERROR',
  fatal: 'ERROR',
  silent: 'ERROR',
};

// A URL keeps its scheme and host: RPC and collector URLs often carry an API key in their
// path, query or user part, and an SDK error message may quote one (e.g. ethers' requestUrl).
const URL_IN_TEXT = /\b([a-z][a-z0-9+.-]*:\/\/)(?:[^\s/@'"]*@)?([^\s/?#'"@]+)([^\s'"]*)/gi;
function redactUrls(text: string): string {
  return text.replace(URL_IN_TEXT, (_, scheme: string, host: string, rest: string) =>
    rest ? `${scheme}${host}/[redacted]` : `${scheme}${host}`,
  );
}

/**
 * The SDK's log metadata, flattened to what cannot carry a payload: ids, names, counts, flags.
 * Objects and arrays (workflow or activity arguments, headers, a failure's details) are dropped;
 * an error keeps its type and message only, as the project's own lines do; URLs lose all but
 * their host.
 */
function safeMeta(meta: LogMetadata | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(meta ?? {})) {
    if (value instanceof Error) out[key] = { name: value.name, message: redactUrls(value.message) };
    else if (typeof value === 'string') out[key] = redactUrls(value);
    else if (typeof value === 'number' || typeof value === 'boolean') out[key] = value;
    else if (typeof value === 'bigint') out[key] = String(value);
  }
  return out;
}

/** The SDK's Logger interface, writing through pino. */
export function sdkLogger(log: Logger): SdkLogger {
  // The level first: the SDK logs each activity and workflow task at DEBUG, and flattening
  // and redacting a line pino then drops was a per-call cost of the worker.
  const write = (level: LogLevel, message: string, meta?: LogMetadata) => {
    const pinoLevel = PINO_LEVEL[level] ?? 'info';
    if (log.isLevelEnabled(pinoLevel)) log[pinoLevel](safeMeta(meta), redactUrls(message));
  };
  return {
    log: write,
    trace: (message, meta) => write('TRACE', message, meta),
    debug: (message, meta) => write('DEBUG', message, meta),
    info: (message, meta) => write('INFO', message, meta),
    warn: (message, meta) => write('WARN', message, meta),
    error: (message, meta) => write('ERROR', message, meta),
  };
}

function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export type TemporalRuntime = {
  /** Core's metrics in the Prometheus text format ('' when off or when core did not answer). */
  coreMetrics(): Promise<string>;
};

/**
 * Installs the SDK runtime: logs through `log` at `level` (a pino level), and with `metrics`
 * core's Prometheus exporter on a free loopback port (retried on another if it was taken
 * meanwhile). Call once per process, before any NativeConnection.
 */
export async function installTemporalRuntime(opts: {
  log: Logger;
  level: string;
  metrics: boolean;
}): Promise<TemporalRuntime> {
  // Core at DEBUG or TRACE prints activity inputs (small payloads in full): never below INFO.
  const requested = SDK_LEVEL[opts.level] ?? 'INFO';
  const core: LogLevel = requested === 'TRACE' || requested === 'DEBUG' ? 'INFO' : requested;
  const logging = { filter: { core, other: core === 'ERROR' ? 'ERROR' : ('WARN' as LogLevel) }, forward: {} };
  const logger = sdkLogger(opts.log);
  if (!opts.metrics) {
    Runtime.install({ logger, telemetryOptions: { logging } });
    return { coreMetrics: async () => '' };
  }
  // Another process may bind the free port between our probe and core's bind: two more tries,
  // each on a port of its own.
  const portTaken = retry(
    handleWhen((err) => /address|bind|in use/i.test((err as Error).message)),
    { maxAttempts: 2 },
  );
  const port = await portTaken.execute(async () => {
    const port = await freeLoopbackPort();
    Runtime.install({
      logger,
      telemetryOptions: { logging, metrics: { prometheus: { bindAddress: `127.0.0.1:${port}` } } },
    });
    return port;
  });
  const url = `http://127.0.0.1:${port}/metrics`;
  return {
    async coreMetrics() {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(SCRAPE_TIMEOUT_MS) });
        return res.ok ? await res.text() : '';
      } catch {
        return '';
      }
    },
  };
}
