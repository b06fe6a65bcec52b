// A request charged after its answer (a metered or channel-paid MCP tool call) goes up under a
// JSON-RPC id of the gateway's own, and the answer comes back down under the caller's id. Its
// charge depends on which response answers it (a failed one costs nothing: gateway/mcp/
// answer-watch.ts), and an upstream that routes responses by id within a session (the MCP SDK's
// server does) would otherwise hand the paid request the response to another request its
// caller sent with the same id: the paid call charged nothing, its result delivered on the
// other request's stream. The gateway's id is random and put back wherever it appears, so no
// request of the caller's can share it.
//
// The request is changed in place: the id's value is replaced in the text, every other byte as
// the caller sent it (no parse of the whole request again). A request naming its id twice is
// refused: which one an upstream reads is its parser's choice.
//
// Restoring is a byte replacement of the gateway's id wherever it appears in the answer: quoted
// (a JSON value) by the caller's id, and anywhere else (inside a string, escaped or in a message's
// text) by the caller's id as that string would hold it. A response of any size and an event
// stream pass as they arrive (only bytes that may begin the id are held, until the next chunk
// says whether they do). The id is letters and digits only, so no JSON writer escapes any of it.
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { Transform, pipeline, type Readable } from 'node:stream';
import { createBrotliDecompress, createUnzip, createZstdDecompress } from 'node:zlib';
import { topLevelMemberSpans } from './member-spans.ts';
import { JsonRpcRequestError } from './request.ts';

/** A request re-written under the gateway's id. */
export type OwnIdRequest = {
  /** The id the upstream sees. */
  id: string;
  /** The request to send up, the same but for its id. */
  body: Buffer;
  /** The caller's id as it wrote it (JSON text), to put back into the answer. */
  callerIdText: string;
};

/** A fresh id of the gateway's: letters and digits, 128 random bits. */
export function gatewayRpcId(): string {
  return `x402gw${randomBytes(16).toString('hex')}`;
}

/** Where a request's id value lies in its text: [start, end) bytes. */
export type IdSpan = [number, number];

/**
 * Where the request's (`body`, one JSON object JSON.parse accepted) id lies; null when it has none
 * (a notification). A JsonRpcRequestError when it names its id twice.
 */
export function idSpanOf(body: Buffer): IdSpan | null {
  const spans = topLevelMemberSpans(body, 'id');
  if (spans.length > 1) throw new JsonRpcRequestError('MCP body names its id twice');
  return spans[0] ?? null;
}

/**
 * The request with the gateway's own id in place of its caller's, at `span` (idSpanOf's: found
 * once per request, by the parse stage, else here); null when it has none.
 */
export function withOwnId(
  body: Buffer,
  span: IdSpan | null = idSpanOf(body),
  id = gatewayRpcId(),
): OwnIdRequest | null {
  if (!span) return null;
  const [start, end] = span;
  return {
    id,
    body: Buffer.concat([body.subarray(0, start), Buffer.from(JSON.stringify(id), 'utf8'), body.subarray(end)]),
    callerIdText: body.toString('utf8', start, end),
  };
}

/** A replacement of the gateway's id in a byte stream by the caller's (see above), fed chunk by chunk. */
export type IdRestorer = {
  /** The bytes of `chunk` that can go on (a possible start of the id is held back). */
  push(chunk: Buffer): Buffer;
  /** What was held back, at the stream's end. */
  end(): Buffer;
};

export function idRestorer(id: string, callerIdText: string): IdRestorer {
  // The quoted id first (a JSON value: the caller's id as it wrote it), then what is left of it
  // anywhere else (as the caller's id reads inside a JSON string).
  const quoted = replacing(Buffer.from(JSON.stringify(id), 'utf8'), Buffer.from(callerIdText, 'utf8'));
  const bare = replacing(Buffer.from(id, 'utf8'), Buffer.from(inString(callerIdText), 'utf8'));
  return {
    push: (chunk) => bare.push(quoted.push(chunk)),
    end() {
      const rest = bare.push(quoted.end());
      const last = bare.end();
      return last.length ? Buffer.concat([rest, last]) : rest;
    },
  };
}

/** The caller's id as a JSON string's text holds it: a string's characters escaped, a number's text. */
function inString(callerIdText: string): string {
  return callerIdText.startsWith('"') ? JSON.stringify(JSON.parse(callerIdText) as string).slice(1, -1) : callerIdText;
}

/** A replacement of every `pattern` in a byte stream by `replacement`, fed chunk by chunk. */
function replacing(pattern: Buffer, replacement: Buffer): IdRestorer {
  let held: Buffer = Buffer.alloc(0);
  return {
    push(chunk) {
      const data = held.length ? Buffer.concat([held, chunk]) : chunk;
      const parts: Buffer[] = [];
      let from = 0;
      for (let at = data.indexOf(pattern, from); at !== -1; at = data.indexOf(pattern, from)) {
        parts.push(data.subarray(from, at), replacement);
        from = at + pattern.length;
      }
      // The longest end of what is left that could begin the pattern is held for the next chunk.
      const keep = heldPrefix(data, from, pattern);
      held = Buffer.from(data.subarray(data.length - keep));
      parts.push(data.subarray(from, data.length - keep));
      return parts.length === 1 ? parts[0] : Buffer.concat(parts);
    },
    end() {
      const rest = held;
      held = Buffer.alloc(0);
      return rest;
    },
  };
}

/** How many bytes at the end of data[from..] are a proper start of `pattern`. */
function heldPrefix(data: Buffer, from: number, pattern: Buffer): number {
  for (let k = Math.min(pattern.length - 1, data.length - from); k > 0; k--)
    if (data.subarray(data.length - k).equals(pattern.subarray(0, k))) return k;
  return 0;
}

/** The answer with the gateway's id put back to the caller's (errors pass through with their cause). */
export function restoringId(body: Readable, id: string, callerIdText: string): Readable {
  const restorer = idRestorer(id, callerIdText);
  const transform = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      const out = restorer.push(chunk);
      callback(null, out.length ? out : undefined);
    },
    flush(callback) {
      const rest = restorer.end();
      callback(null, rest.length ? rest : undefined);
    },
  });
  pipeline(body, transform, () => undefined);
  return transform;
}

/**
 * The answer's text as it streams: its body when not encoded (the gateway asks for an unencoded
 * answer whenever it sends its own id), else, for an upstream that encoded it all the same
 * (gzip, deflate, br, zstd), the body decoded; null for another or a stacked encoding (the id
 * is then not put back). A streamed answer is passed on decoded (without its Content-Encoding),
 * a transactional one kept decoded.
 */
export function decodedAnswer(headers: IncomingHttpHeaders, body: Readable): Readable | null {
  const encoding = encodingOf(headers);
  if (encoding === 'identity') return body;
  const decoder =
    encoding === 'gzip' || encoding === 'x-gzip' || encoding === 'deflate'
      ? createUnzip()
      : encoding === 'br'
        ? createBrotliDecompress()
        : encoding === 'zstd'
          ? createZstdDecompress()
          : null;
  if (!decoder) return null;
  // A broken encoding breaks the answer off, as a broken upstream does.
  pipeline(body, decoder, () => undefined);
  return decoder;
}

function encodingOf(headers: IncomingHttpHeaders): string {
  return String(headers['content-encoding'] ?? 'identity')
    .trim()
    .toLowerCase();
}
