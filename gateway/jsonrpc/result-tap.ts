// Watches an upstream's JSON-RPC answer as it passes to the caller, without changing a byte,
// and hands each response's `result` to `see` before the caller can have read it (A2A binds the
// tasks an answer names this way: gateway/a2a/tasks.ts).
// - Server-Sent Events: each event is passed as soon as it is whole; an event waits for `see`
//   of its result. Only the event still arriving is held (at most 1 MiB, beyond which the rest
//   passes unwatched).
// - JSON: chunks pass as they come, each held until the next arrives, so the last one leaves
//   only once `see` of the answer's result is done (the whole answer is watched up to 1 MiB).
import { Transform, type Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';

const MAX_WATCHED = 1024 * 1024;

/** What is told each result: it settles before the bytes that carried it pass on. */
type See = (result: unknown) => Promise<void>;

function resultOf(text: string): unknown {
  try {
    return (JSON.parse(text) as { result?: unknown } | null)?.result;
  } catch {
    return undefined;
  }
}

/** The data of one SSE event (its `data:` lines joined), or null when it has none. */
function eventData(event: string): string | null {
  const lines = event.split(/\r\n|\r|\n/).filter((l) => l.startsWith('data:'));
  return lines.length ? lines.map((l) => l.slice(5).replace(/^ /, '')).join('\n') : null;
}

/**
 * A blank line: two line ends in a row, each CRLF, LF or CR (the SSE specification takes all
 * three). A CR last in the bytes so far counts as a line end of its own: an LF after it then
 * starts the next event with an empty line, which carries nothing.
 */
const BLANK_LINE = /(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))/;

/** The end of the first whole event in `bytes` after `from` (past its blank line), or -1. */
function eventEnd(bytes: Buffer, from: number): number {
  // latin1: one character per byte, so the match's index is the byte offset.
  const found = BLANK_LINE.exec(bytes.toString('latin1', from));
  return found ? from + found.index + found[0].length : -1;
}

/** A wrapper watching the answer's results, or null when it cannot be read (an encoded body). */
export function resultTap(headers: IncomingHttpHeaders, see: See): ((source: Readable) => Readable) | null {
  if (headers['content-encoding']) return null;
  const eventStream = /^text\/event-stream/i.test(String(headers['content-type'] ?? ''));
  return (source) => source.pipe(eventStream ? sseTap(see) : jsonTap(see));
}

function sseTap(see: See): Transform {
  // Bytes, not text: the answer passes exactly as sent, whatever its encoding.
  let pending: Buffer = Buffer.alloc(0);
  let watching = true;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      if (!watching) return done(null, chunk);
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      void (async () => {
        let start = 0;
        for (let end = eventEnd(pending, start); end !== -1; start = end, end = eventEnd(pending, start)) {
          const data = eventData(pending.subarray(start, end).toString('utf8'));
          if (data?.startsWith('{')) await see(resultOf(data));
        }
        const whole = pending.subarray(0, start);
        pending = pending.subarray(start);
        if (pending.length > MAX_WATCHED) {
          watching = false;
          const all = Buffer.concat([whole, pending]);
          pending = Buffer.alloc(0);
          return done(null, all);
        }
        done(null, whole.length ? whole : undefined);
      })();
    },
    flush(done) {
      done(null, pending.length ? pending : undefined);
    },
  });
}

function jsonTap(see: See): Transform {
  const chunks: Buffer[] = [];
  let size = 0;
  let held: Buffer | null = null;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      if (size <= MAX_WATCHED) chunks.push(chunk);
      const previous = held;
      held = chunk;
      done(null, previous ?? undefined);
    },
    flush(done) {
      const last = held;
      const finish = () => done(null, last ?? undefined);
      if (size > MAX_WATCHED) return finish();
      void see(resultOf(Buffer.concat(chunks).toString('utf8'))).then(finish, finish);
    },
  });
}
