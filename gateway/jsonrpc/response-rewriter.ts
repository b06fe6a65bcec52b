// A bounded re-writer of one JSON-RPC response in an upstream's answer, for the payment
// transports whose receipt goes into the answer itself (gateway/mcp/x402.ts, gateway/a2a/x402.ts). It holds
// back only the one response it looks for, never more than MAX_HELD_BYTES:
// - application/json: the whole body (one JSON-RPC response to one request), handed to `rewrite`;
// - text/event-stream: events pass as they complete; the first whose data `rewrite` re-writes is
//   replaced, and everything after it passes untouched and unparsed.
// Anything else, an encoded (compressed) body, or a body or event over the bound, passes unchanged.
import { Transform, pipeline, type Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';

/** What is held back to find the response: one tools/call result, as MCP servers answer it. */
const MAX_HELD_BYTES = 1024 * 1024;

/**
 * A wrapper passing the upstream's answer through `rewrite`, which is given one JSON-RPC
 * response's text (the whole JSON body, or an SSE event's data) and returns it re-written, or
 * null when it is not the one to re-write (then it passes unchanged, and so does everything after
 * the one re-written). Null when the answer is not plain JSON or SSE (see above).
 */
export function responseRewriter(
  headers: IncomingHttpHeaders,
  rewrite: Rewrite,
): ((body: Readable) => Readable) | null {
  const encoding = String(headers['content-encoding'] ?? 'identity').toLowerCase();
  if (encoding !== 'identity') return null;
  const contentType = String(headers['content-type'] ?? '').toLowerCase();
  const make = /^application\/json\b/.test(contentType)
    ? jsonInjector
    : /^text\/event-stream\b/.test(contentType)
      ? sseInjector
      : null;
  if (!make) return null;
  return (body) => {
    const transform = make(rewrite);
    // Errors (an upstream that breaks off, a body timeout) reach the transform with their cause.
    pipeline(body, transform, () => undefined);
    return transform;
  };
}

type Rewrite = (text: string) => string | null;

function jsonInjector(rewrite: Rewrite): Transform {
  let held: Buffer[] = [];
  let size = 0;
  let passing = false;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      if (passing) return callback(null, chunk);
      held.push(chunk);
      size += chunk.length;
      if (size <= MAX_HELD_BYTES) return callback();
      passing = true;
      const out = Buffer.concat(held);
      held = [];
      callback(null, out);
    },
    flush(callback) {
      if (passing) return callback();
      const body = Buffer.concat(held);
      const injected = rewrite(body.toString('utf8'));
      callback(null, injected === null ? body : Buffer.from(injected, 'utf8'));
    },
  });
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * Events are found with one forward scan for line feeds: an event ends at a blank line (LF or
 * CRLF line ends, `\r?\n\r?\n`). The held bytes live in one buffer grown by doubling, so a
 * byte is copied a bounded number of times however the upstream chunks its answer.
 */
function sseInjector(rewriteData: Rewrite): Transform {
  let held = Buffer.alloc(0);
  let length = 0;
  /** Where the event being read starts, and where to look for its end next. */
  let start = 0;
  let scan = 0;
  let passing = false;
  /** The event re-written with the receipt, or null when it is not the response to this request. */
  const rewrite = (event: string): string | null => {
    const lines = event.split(/\r?\n/);
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length === 0) return null;
    const injected = rewriteData(data.join('\n'));
    if (injected === null) return null;
    return [...lines.filter((l) => !l.startsWith('data:')), `data: ${injected}`].join('\n');
  };
  const append = (chunk: Buffer) => {
    if (length + chunk.length > held.length) {
      // Sized on what is still held, not on what passed: a long stream of small events stays small.
      const grown = Buffer.allocUnsafe(Math.max(2 * (length - start + chunk.length), 4096));
      held.copy(grown, 0, start, length);
      length -= start;
      scan -= start;
      start = 0;
      held = grown;
    }
    chunk.copy(held, length);
    length += chunk.length;
  };
  /** The end of the blank line at the line feed `at` (after it), 0 when incomplete, -1 when none. */
  const blankLineEnd = (at: number): number => {
    if (at + 1 >= length) return 0;
    if (held[at + 1] === LF) return at + 2;
    if (held[at + 1] !== CR) return -1;
    if (at + 2 >= length) return 0;
    return held[at + 2] === LF ? at + 3 : -1;
  };
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      if (passing) return callback(null, chunk);
      append(chunk);
      const out: Buffer[] = [];
      // Events that are not the answer pass as they are, as one run of bytes per chunk.
      let passFrom = start;
      while (!passing) {
        const at = held.subarray(0, length).indexOf(LF, scan);
        if (at < 0) {
          scan = length;
          break;
        }
        const end = blankLineEnd(at);
        if (end === 0) {
          scan = at;
          break;
        }
        scan = at + 1;
        if (end < 0) continue;
        const eventEnd = at > start && held[at - 1] === CR ? at - 1 : at;
        // Only an event with a `{` in it can carry a JSON-RPC response.
        const rewritten =
          eventEnd > start && held.subarray(start, eventEnd).includes(0x7b)
            ? rewrite(held.toString('utf8', start, eventEnd))
            : null;
        if (rewritten !== null) {
          passing = true;
          out.push(Buffer.from(held.subarray(passFrom, start)), Buffer.from(`${rewritten}\n\n`, 'utf8'));
          passFrom = end;
          start = end;
          break;
        }
        start = end;
        scan = end;
      }
      if (!passing && length - start > MAX_HELD_BYTES) passing = true;
      const passedTo = passing ? length : start;
      if (passedTo > passFrom) out.push(Buffer.from(held.subarray(passFrom, passedTo)));
      if (passing) held = Buffer.alloc(0);
      callback(null, out.length > 0 ? Buffer.concat(out) : undefined);
    },
    flush(callback) {
      callback(null, !passing && length > start ? Buffer.from(held.subarray(start, length)) : undefined);
    },
  });
}
