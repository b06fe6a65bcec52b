// Reading a capped request body: raw-body stops at the cap and raises 413 without buffering
// past it (a declared Content-Length over the cap is refused before a byte is read).
import type { IncomingMessage } from 'node:http';
import getRawBody from 'raw-body';
import { ApiError, badRequest } from '../errors.ts';
import type { BodyReservation } from './body-budget.ts';
import type { BodyPace } from '../../gateway/config.ts';

export const MAX_TRANSACTIONAL_BODY = 32 * 1024 * 1024;

/**
 * How much of a refused body is read and thrown away before answering. A server that answers
 * and closes while the caller is still sending makes the kernel reset the connection, and the
 * caller sees ECONNRESET instead of the 413; draining a bounded remainder lets it read the
 * answer on a live connection. Past the bound (or after DRAIN_MS) the connection is closed.
 */
const DRAIN_BYTES = 64 * 1024 * 1024;
const DRAIN_MS = 5_000;

async function drain(req: IncomingMessage): Promise<boolean> {
  req.resume();
  return new Promise((resolve) => {
    let seen = 0;
    const finish = (drained: boolean) => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onEnd);
      resolve(drained);
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > DRAIN_BYTES) finish(false);
    };
    const onEnd = () => finish(req.complete);
    const timer = setTimeout(() => finish(false), DRAIN_MS);
    if (req.complete) return finish(true);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onEnd);
  });
}

/** How slowly a body may arrive: BODY_READ_TIMEOUT_MS, BODY_MIN_BYTES_PER_S after BODY_RATE_GRACE_MS. */

/**
 * Watches a body being read: past the grace period it must have arrived at the minimum rate on
 * average, and all of it within the deadline. A caller that trickles bytes (slow loris) would
 * otherwise hold a connection, a buffer and a rate-limit token for as long as it likes.
 */
function watchPace(req: IncomingMessage, pace: BodyPace): { tooSlow(): boolean; stop(): void } {
  const startedAt = performance.now();
  let received = 0;
  let slow = false;
  const onData = (chunk: Buffer) => void (received += chunk.length);
  req.on('data', onData);
  const timer = setInterval(
    () => {
      const elapsed = performance.now() - startedAt;
      const owed = ((elapsed - pace.graceMs) / 1000) * pace.minBytesPerSecond;
      if (elapsed >= pace.timeoutMs || (elapsed > pace.graceMs && received < owed)) {
        slow = true;
        clearInterval(timer);
        // Ends the read (raw-body rejects on the stream's error) but keeps the socket, so the
        // caller still gets its 408; the connection is closed after the answer.
        req.pause();
        req.emit('error', Object.assign(new Error('request body too slow'), { code: 'BODY_TOO_SLOW' }));
      }
    },
    Math.min(1_000, pace.graceMs || 1_000),
  );
  timer.unref();
  return {
    tooSlow: () => slow,
    stop: () => {
      clearInterval(timer);
      req.off('data', onData);
    },
  };
}

/** A Content-Length header's value as a number, or null (absent, chunked or not a length). */
export function contentLengthOf(value: string | undefined): number | null {
  return value !== undefined && /^\d{1,15}$/.test(value) ? Number(value) : null;
}

/** A body declared over `limit`: refused before any of it is read. */
export function declaredOver(req: IncomingMessage, limit: number): boolean {
  return (contentLengthOf(req.headers['content-length']) ?? 0) > limit;
}

export async function readCappedBody(
  req: IncomingMessage,
  limit: number,
  pace?: BodyPace,
  reservation?: BodyReservation,
): Promise<Buffer> {
  const watch = pace ? watchPace(req, pace) : null;
  // Bytes held count against the in-flight budget as they arrive (the caller releases them).
  let refused: unknown = null;
  const onChunk = (chunk: Buffer) => {
    try {
      reservation?.take(chunk.length);
    } catch (err) {
      refused = err;
      req.pause();
      req.emit('error', err);
    }
  };
  if (reservation) req.on('data', onChunk);
  try {
    // With the declared length, raw-body refuses a body over the cap before reading a byte of it.
    const length = contentLengthOf(req.headers['content-length']);
    return await getRawBody(req, length === null ? { limit } : { limit, length });
  } catch (err) {
    if (refused)
      throw Object.assign(refused as ApiError, { headers: { ...(refused as ApiError).headers, Connection: 'close' } });
    if (watch?.tooSlow()) throw new ApiError(408, 'request body arrived too slowly', { Connection: 'close' });
    if ((err as { status?: number }).status === 413) {
      const drained = await drain(req);
      throw new ApiError(413, 'request body exceeds 32 MiB', drained ? {} : { Connection: 'close' });
    }
    throw badRequest('could not read request body');
  } finally {
    watch?.stop();
    req.off('data', onChunk);
  }
}

/**
 * A streamed body that has already arrived whole, as the bytes it is; null while any of it is
 * still to come, or when its length is not declared. A small body comes in the packets of its
 * headers, so by the time the gate has run Node's HTTP parser has put all of it in the
 * request's buffer: sent as a buffer it skips a stream relay per call (the upstream client's
 * lazy body) and may be sent again after a connect failure. Nothing is waited for and nothing
 * is held beyond what the socket already delivered, so memory still does not grow with body size.
 */
export function arrivedBody(req: IncomingMessage, declaredLength: number | null): Buffer | null {
  if (declaredLength === null || req.readableFlowing || req.readableLength !== declaredLength) return null;
  if (declaredLength === 0) return req.complete ? Buffer.alloc(0) : null;
  return req.read(declaredLength) as Buffer | null;
}
