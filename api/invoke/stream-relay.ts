// Writing a streaming call's answer: the upstream's status, headers (by the header rules) and
// body piped down as they arrive, with backpressure, and the outcome to record once it ends.
// - Event streams get `X-Accel-Buffering: no` and their headers flushed at once.
// - A caller that hangs up aborts the upstream call (caller_aborted); an upstream that dies
//   mid-stream cuts the caller's response short and is recorded failed (the domain's class of
//   a broken body: timeout or stream_interrupted).
// - Before the first byte: 502 unreachable/refused/blocked/circuit open, 504 timeout, with
//   coarse bodies that never name the upstream.
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Context } from 'koa';
import { ApiError } from '../errors.ts';
import { forwardableResponseHeaders } from '../../gateway/upstream/headers.ts';
import { brokenBodyClass, classifyError, type ErrorClass } from '../../gateway/upstream/errors.ts';
import { coarseMessage, statusForClass } from '../proxy/upstream-failure.ts';
import type { UpstreamResponse } from '../../gateway/upstream/client.ts';
import { answeredOutcome } from '../../gateway/invocations/outcome.ts';
import { mcpReceiptInjector } from '../proxy/mcp.ts';
import { a2aReceiptInjector } from '../proxy/a2a.ts';
import { decodedAnswer, restoringId } from '../../gateway/jsonrpc/own-id.ts';
import { failedBeforeUpstream, type Outcome, type StreamRecord } from './stream-record.ts';
import type { ProxyCall } from '../proxy/call.ts';
import { failedOutcome, type MeteredCall } from '../../gateway/invocations/metered.ts';

type PipeEnd = { by: 'done' } | { by: 'caller' } | { by: 'upstream'; err: unknown };

/**
 * Pipes the upstream body to the caller with backpressure and reports who ended it first.
 * Unlike stream.pipeline, a broken side is destroyed without an error object, so the
 * framework does not log a routine hang-up as a server error.
 */
function pipeDown(source: Readable, res: ServerResponse, keepOpen: boolean): Promise<PipeEnd> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (end: PipeEnd) => {
      if (settled) return;
      settled = true;
      resolve(end);
    };
    source.on('error', (err) => {
      // The caller must see a broken response, not a short one that looks whole.
      if (!settled) res.destroy();
      settle({ by: 'upstream', err });
    });
    res.once('close', () => {
      if (res.writableFinished) return settle({ by: 'done' });
      source.destroy();
      settle({ by: 'caller' });
    });
    res.once('finish', () => settle({ by: 'done' }));
    // Kept open for trailers: the body is done when the source ends, the response is ended later.
    if (keepOpen) source.once('end', () => settle({ by: 'done' }));
    source.pipe(res, { end: !keepOpen });
  });
}

/**
 * Aborts the upstream call when the caller hangs up before the response is done, or once
 * `deadlineMs` (a metered answer's: its charge must still be collectable) has passed.
 */
export function watchHangup(
  res: ServerResponse,
  deadlineMs: number | null = null,
): { signal: AbortSignal; stop(): void } {
  const hangup = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) hangup.abort();
  };
  res.once('close', onClose);
  const timer = deadlineMs === null ? null : setTimeout(() => hangup.abort(), deadlineMs).unref();
  return {
    signal: hangup.signal,
    stop: () => {
      res.off('close', onClose);
      if (timer) clearTimeout(timer);
    },
  };
}

const EVENT_STREAM = /^text\/event-stream/i;

/** Pipes the upstream's answer down as it arrives; returns the outcome to record. */
export async function relay(
  ctx: Context,
  call: ProxyCall,
  reply: UpstreamResponse,
  gatewayHeaders: Record<string, string>,
  record: StreamRecord,
  tap: ((source: Readable) => Readable) | null,
  metered: MeteredCall | null = null,
  trailer: string | null = null,
): Promise<Outcome> {
  const res = ctx.res;
  ctx.respond = false;
  const out: Record<string, string | string[]> = { ...forwardableResponseHeaders(reply.headers), ...gatewayHeaders };
  // A trailer is sent only in a chunked body, which its declaration announces; the caller ends
  // the response once the trailer's value is known (endWithTrailer).
  if (trailer) {
    out.trailer = trailer;
    delete out['content-length'];
  }
  // A payment made in the JSON-RPC body gets its receipt in the answer: an MCP tool result's
  // `_meta` (mcp.ts), an A2A task's or message's metadata (a2a.ts).
  const injectReceipt = mcpReceiptInjector(call, reply.headers) ?? a2aReceiptInjector(call, reply.headers);
  // A request sent up under the gateway's own JSON-RPC id is answered under its caller's
  // (gateway/jsonrpc/own-id.ts), an answer the upstream encoded all the same passed on decoded.
  const ownId = call.mcp?.ownId ?? null;
  const decoded = ownId ? decodedAnswer(reply.headers, reply.body) : null;
  if (injectReceipt || decoded) delete out['content-length'];
  if (decoded && decoded !== reply.body) delete out['content-encoding'];
  const contentType = String(reply.headers['content-type'] ?? '');
  const eventStream = EVENT_STREAM.test(contentType);
  if (eventStream) out['x-accel-buffering'] = 'no';
  res.writeHead(reply.status, out);
  if (eventStream) res.flushHeaders();

  let firstByteAt: number | null = null;
  reply.body.once('data', () => {
    firstByteAt = performance.now();
  });
  // A metered call's meter sees the upstream's bytes as they pass, with no copy of its own
  // beyond its bound (only a metered call adds this listener).
  // What it measured so far is kept on the row while the answer streams, so a process that
  // dies mid-stream still charges what was measured (gateway/invocations/metered.ts).
  let tracking: { stop(): void } | null = null;
  if (metered) {
    const reader = metered.reader;
    reader.onHeaders(reply.headers);
    // The answer as its text, when it was decoded (an upstream that encoded it though asked not to).
    (decoded ?? reply.body).on('data', (chunk: Buffer) => reader.onChunk(chunk));
    tracking = metered.track(reply.status);
  }
  const injected = injectReceipt ? injectReceipt(reply.body) : (decoded ?? reply.body);
  const received = ownId && decoded ? restoringId(injected, ownId.id, ownId.callerIdText) : injected;
  // An A2A answer is watched for the tasks it names, which are bound as they pass (a2a.ts).
  const source = tap ? tap(received) : received;
  const digest = record.hashResponse(source);
  const ended = await pipeDown(source, res, trailer !== null);
  tracking?.stop();
  digest.finish(ended.by === 'done');
  reply.finish();
  const failure: ErrorClass | null =
    ended.by === 'done'
      ? null
      : ended.by === 'caller'
        ? 'caller_aborted'
        : brokenBodyClass(ended.err, reply.timedOut());
  const end = performance.now();
  return {
    ...answeredOutcome(reply.status, failure),
    // The charge is known here, once the answer has ended (whole or broken off).
    ...metered?.complete({ kind: 'answered', status: reply.status, complete: ended.by === 'done' }),
    latencyMs: Math.round(end - reply.startedAt),
    ttftMs: Math.round((firstByteAt ?? end) - reply.startedAt),
    responseContentType: contentType || null,
  };
}

/** The upstream could not be reached: recorded, then 502/504, or nothing when the caller is gone. */
export async function answerUnreached(
  ctx: Context,
  record: StreamRecord,
  err: unknown,
  metered: MeteredCall | null = null,
): Promise<void> {
  const { errorClass, reached } = classifyError(err);
  await record.complete({ ...failedBeforeUpstream(errorClass), ...metered?.complete(failedOutcome(reached)) });
  if (errorClass === 'caller_aborted') {
    ctx.respond = false; // nobody is left to answer
    return;
  }
  throw new ApiError(statusForClass(errorClass), coarseMessage(errorClass));
}

/** Ends a response kept open for trailers, with `trailers` (none when the caller is gone). */
export function endWithTrailer(res: ServerResponse, trailers: Record<string, string> | null): void {
  if (res.destroyed || res.writableEnded) return;
  if (trailers) res.addTrailers(trailers);
  res.end();
}
