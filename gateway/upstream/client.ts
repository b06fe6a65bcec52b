// The upstream client shared by the transactional activity and the streaming route: one
// SSRF-guarded undici dispatcher (dispatcher.ts), one breaker per upstream (breaker.ts), and
// the retry rule below. `open` returns once the final attempt's response headers are in;
// the caller then pipes or reads the body.
//
// Retry rule (docs/PROXY.md):
// - A failure before any request byte can have left (refused, DNS, connect timeout) is
//   retried, provided the body can be sent again (a buffer, or a stream not yet read).
// - Anything that reached the upstream — an answer of 429/502/503/504, a reset or a timeout
//   after the request was written — is re-sent only when the agent opted in
//   (retry_non_idempotent) and the body is a buffer. 429 and 503 honour Retry-After.
// - Waits are full-jitter exponential; no wait may end past the call's deadline.
// - An SSRF refusal, an open circuit or the caller hanging up ends the call at once.
// Written out rather than as a cockatiel retry policy (the library's breaker is used below):
// cockatiel decides to retry before it knows the wait, so it cannot give up when the wait would
// pass the deadline, and its wait does not end when the caller hangs up.
import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import { BrokenCircuitError } from 'cockatiel';
import { createUpstreamDispatcher, type Resolver } from './dispatcher.ts';
import { BreakerRegistry, type BreakerOptions } from './breaker.ts';
import { TenantSlots } from './tenant-slots.ts';
import { circuitKey, type OpenCircuits } from './open-circuits.ts';
import { upstreamTarget } from './targets.ts';

/** Per tenant and origin; the pool to an origin holds 256 (dispatcher.ts), so no tenant can take it all. */
const DEFAULT_TENANT_CONNECTIONS = 64;
import { DEFAULT_RETRY, RETRYABLE_STATUSES, fullJitterDelay, parseRetryAfter, type RetryOptions } from './retry.ts';
import { UpstreamError, classifyError } from './errors.ts';
import { traceClientCall } from '../../lib/observability/spans.ts';

export { UpstreamError, type ErrorClass } from './errors.ts';

export type UpstreamRequest = {
  url: string;
  /** POST (default); DELETE ends an MCP member's session (api/mcp-servers/endpoint.ts). */
  method?: 'POST' | 'DELETE';
  headers: Record<string, string>;
  /** A buffer can be re-sent; a stream only until its first byte has been read. */
  body?: Buffer | Readable;
  /** The call's overall deadline in ms from now: every attempt and every wait falls inside it. */
  deadlineMs: number;
  /**
   * true (transactional): the deadline bounds everything, reading the answer included.
   * false (streaming): it bounds connecting and retrying; once a request is being sent, the
   * wait for headers is undici's idle-style headers timeout and the body's is idleTimeoutMs.
   */
  deadlineCoversBody: boolean;
  /** Longest silence between two body chunks. */
  idleTimeoutMs?: number;
  /** The caller's hang-up or the activity's cancellation. */
  signal?: AbortSignal;
  /** agent.retry_non_idempotent: may a request that reached the upstream be sent again? */
  resendAllowed: boolean;
  /** Whose call this is: breakers are per tenant and origin, so one tenant cannot open another's. */
  tenantId?: string;
};

export type UpstreamResponse = {
  status: number;
  headers: IncomingHttpHeaders;
  body: Dispatcher.ResponseData['body'];
  /** Attempts made, this one included. */
  attempts: number;
  /** From the start of the call to the final attempt's response headers. */
  ttftMs: number;
  /** performance.now() when the call started. */
  startedAt: number;
  /** Whether the deadline expired (tells a body error apart from a timeout). */
  timedOut(): boolean;
  /** Stops the deadline timer; call when the body has been consumed. */
  finish(): void;
};

export type UpstreamClientOptions = {
  allow: string[];
  resolver?: Resolver;
  connectTimeoutMs?: number;
  breaker?: Partial<BreakerOptions>;
  /** Where the breakers announce openings (open-circuits.ts): this process's table by default. */
  circuits?: OpenCircuits;
  retry?: Partial<RetryOptions>;
  /** UPSTREAM_TENANT_CONNECTIONS: requests one tenant may have open to one origin at a time. */
  tenantConnections?: number;
  /** How a wait between attempts is spent: a timer by default; a test passes its own clock. */
  wait?: (ms: number, signal: AbortSignal) => Promise<unknown>;
};

export type UpstreamClient = {
  open(req: UpstreamRequest): Promise<UpstreamResponse>;
  readonly breakers: BreakerRegistry;
  readonly dispatcher: Dispatcher;
  close(): Promise<void>;
};

/**
 * A stream body that undici pulls only once it is writing the request, so a connect failure
 * leaves the caller's stream unread (and the call may be retried). Chunks are handed on as
 * they come, with backpressure: nothing is buffered beyond the streams' own high-water marks.
 * Destroying it never destroys the caller's request: the gateway may still have to answer.
 */
function lazyBody(source: Readable) {
  let started = false;
  const onData = (chunk: Buffer) => {
    if (!body.push(chunk)) source.pause();
  };
  const onEnd = () => body.push(null);
  const onError = (err: Error) => body.destroy(err);
  const onClose = () => {
    if (!source.readableEnded)
      body.destroy(Object.assign(new Error('request body ended early'), { code: 'ECONNRESET' }));
  };
  const body: Readable = new Readable({
    read() {
      if (!started) {
        started = true;
        source.on('data', onData);
        source.once('end', onEnd);
        source.once('error', onError);
        source.once('close', onClose);
      }
      source.resume();
    },
    destroy(err, callback) {
      source.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      if (started && !source.readableEnded) source.pause();
      callback(err);
    },
  });
  return {
    get started() {
      return started;
    },
    body,
  };
}

class DeadlineExpired extends Error {
  constructor() {
    super('deadline expired');
    this.name = 'TimeoutError';
  }
}

export function createUpstreamClient(opts: UpstreamClientOptions): UpstreamClient {
  const dispatcher = createUpstreamDispatcher({
    allow: opts.allow,
    resolver: opts.resolver,
    connectTimeoutMs: opts.connectTimeoutMs,
  });
  const breakers = new BreakerRegistry(opts.breaker, {}, opts.circuits);
  const slots = new TenantSlots(opts.tenantConnections ?? DEFAULT_TENANT_CONNECTIONS);
  const retry: RetryOptions = { ...DEFAULT_RETRY, ...opts.retry };
  const wait = opts.wait ?? ((ms: number, signal: AbortSignal) => sleep(ms, undefined, { signal }));

  // One client span per call (retries included); with tracing on it supplies the traceparent sent.
  function open(req: UpstreamRequest): Promise<UpstreamResponse> {
    return traceClientCall(req.url, req.method ?? 'POST', req.headers, async (headers, span) => {
      const reply = await openUntraced({ ...req, headers });
      span?.setAttribute('gateway.upstream.attempts', reply.attempts);
      return reply;
    });
  }

  async function openUntraced(req: UpstreamRequest): Promise<UpstreamResponse> {
    const startedAt = performance.now();
    const deadlineAt = startedAt + req.deadlineMs;
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(new DeadlineExpired()), req.deadlineMs);
    // The slot of the attempt whose answer is being read: given back when its body closes, or at
    // the latest when the caller says it is done with the answer.
    let releaseSlot = () => {};
    const finish = () => {
      clearTimeout(timer);
      releaseSlot();
    };
    // The caller's hang-up or the deadline, whichever comes first: built only when used (a retry's
    // wait, a transactional request), since AbortSignal.any is not free and most calls need neither.
    let combined: AbortSignal | null = null;
    const signal = () => (combined ??= req.signal ? AbortSignal.any([req.signal, deadline.signal]) : deadline.signal);
    const breaker = breakers.for(req.url, req.tenantId);
    const target = upstreamTarget(req.url);
    const slotKey = circuitKey(req.url, req.tenantId);
    let stream = req.body && !Buffer.isBuffer(req.body) ? lazyBody(req.body) : null;
    const replayable = () => !stream || !stream.started;

    const classify = (err: unknown): UpstreamError => {
      if (req.signal?.aborted) return new UpstreamError('caller_aborted', true);
      if (deadline.signal.aborted) return new UpstreamError('timeout', true);
      if (err instanceof BrokenCircuitError) return new UpstreamError('circuit_open', false);
      const { errorClass, reached } = classifyError(err);
      return new UpstreamError(errorClass, reached);
    };

    for (let attempt = 1; ; attempt++) {
      // One of the tenant's own slots to this origin, held until the answer's body is done.
      let release = slots.tryAcquire(slotKey);
      if (!release) {
        try {
          release = await slots.acquire(slotKey, signal());
        } catch (e) {
          finish();
          throw classify(e);
        }
      }
      const remaining = deadlineAt - performance.now();
      let res: Dispatcher.ResponseData;
      try {
        res = await breaker.execute(async () => {
          try {
            return await request(target.url, {
              dispatcher,
              method: req.method ?? 'POST',
              headers: req.headers,
              body: stream ? stream.body : req.body,
              // A streamed upload may take as long as the caller takes: there, undici's own
              // headers timeout (restarted while body chunks flow) bounds the wait instead.
              signal: req.deadlineCoversBody ? signal() : req.signal,
              headersTimeout: req.deadlineCoversBody
                ? Math.max(1, Math.ceil(remaining))
                : (req.idleTimeoutMs ?? req.deadlineMs),
              bodyTimeout: req.idleTimeoutMs ?? Math.max(1, Math.ceil(remaining)),
            });
          } catch (err) {
            // Classified inside the breaker so it counts connect errors and timeouts, not hang-ups or SSRF refusals.
            throw classify(err);
          }
        });
      } catch (err) {
        release();
        const failure = err instanceof UpstreamError ? err : classify(err);
        const retryable =
          (failure.errorClass === 'connect' || failure.errorClass === 'timeout') &&
          !req.signal?.aborted &&
          !deadline.signal.aborted;
        const allowed = failure.reached ? req.resendAllowed && !stream : replayable();
        const backoff = fullJitterDelay(attempt - 1, retry);
        if (!retryable || !allowed || attempt >= retry.maxAttempts || performance.now() + backoff >= deadlineAt) {
          finish();
          throw failure;
        }
        await wait(backoff, signal()).catch((e: unknown) => {
          finish();
          throw classify(e);
        });
        // undici destroyed the failed attempt's body wrapper; the caller's stream is untouched.
        if (stream && req.body && !Buffer.isBuffer(req.body)) stream = lazyBody(req.body);
        continue;
      }

      res.body.once('close', release);
      releaseSlot = release;
      if (RETRYABLE_STATUSES.has(res.statusCode) && req.resendAllowed && !stream && attempt < retry.maxAttempts) {
        const retryAfter = parseRetryAfter(res.headers['retry-after']);
        const pause = Math.max(fullJitterDelay(attempt - 1, retry), retryAfter ?? 0);
        if (performance.now() + pause < deadlineAt) {
          res.body.dump().catch(() => undefined);
          await wait(pause, signal()).catch((e: unknown) => {
            finish();
            throw classify(e);
          });
          continue;
        }
      }
      // Streaming: the deadline bounded getting here; the body is bounded by idleTimeoutMs. The
      // slot stays held while the body flows (released once, when it closes or at finish()):
      // a long stream is an open request to the origin, and counts against its tenant's bound.
      if (!req.deadlineCoversBody) clearTimeout(timer);
      return {
        status: res.statusCode,
        headers: res.headers,
        body: res.body,
        attempts: attempt,
        ttftMs: Math.round(performance.now() - startedAt),
        startedAt,
        timedOut: () => deadline.signal.aborted,
        finish,
      };
    }
  }

  return {
    open,
    breakers,
    dispatcher,
    close: () => dispatcher.close(),
  };
}
