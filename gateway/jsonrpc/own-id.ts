// A request charged after its answer (a metered or channel-paid MCP tool call) goes up under a
// JSON-RPC id of the gateway's own, and the answer comes back down under the caller's id. Its
// charge depends on which response answers it (a failed one costs nothing: gateway/mcp/
// answer-watch.ts), and an upstream that routes responses by id within a session (the MCP SDK's
// server does) would otherwise hand the paid request the response to another request its
// caller sent with the same id: the paid call charged nothing, its result delivered on the
// other request's stream. The gateway's id is random and never shown to the caller, so no
// request of the caller's can share it.
//
// Restoring is a byte replacement of the gateway's id, quoted, wherever it appears in the answer:
// a response of any size and an event stream pass as they arrive (only bytes that may begin the
// id are held, until the next chunk says whether they do). The id is letters and digits only, so
// no JSON writer escapes any of it.
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { Transform, pipeline, type Readable } from 'node:stream';
import { parseKeepingNumbers } from './exact-json.ts';

/** A request re-written under the gateway's id. */
export type OwnIdRequest = {
  /** The id the upstream sees. */
  id: string;
  /** The request to send up, the same but for its id (every number as the caller wrote it). */
  body: Buffer;
  /** The caller's id as JSON text, to put back into the answer. */
  callerIdText: string;
};

/** A fresh id of the gateway's: letters and digits, 128 random bits. */
export function gatewayRpcId(): string {
  return `x402gw${randomBytes(16).toString('hex')}`;
}

/** The request with the gateway's own id in place of its caller's; null when it has no id (a notification) or is not a JSON object. */
export function withOwnId(body: Buffer, id = gatewayRpcId()): OwnIdRequest | null {
  let request: unknown;
  try {
    request = parseKeepingNumbers(body.toString('utf8'));
  } catch {
    return null;
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request) || !Object.hasOwn(request, 'id'))
    return null;
  const fields = request as Record<string, unknown>;
  const callerIdText = JSON.stringify(fields.id);
  if (callerIdText === undefined) return null;
  return { id, body: Buffer.from(JSON.stringify({ ...fields, id }), 'utf8'), callerIdText };
}

/** A replacement of every `"<id>"` in a byte stream by `callerIdText`, fed chunk by chunk. */
export type IdRestorer = {
  /** The bytes of `chunk` that can go on (a possible start of the id is held back). */
  push(chunk: Buffer): Buffer;
  /** What was held back, at the stream's end. */
  end(): Buffer;
};

export function idRestorer(id: string, callerIdText: string): IdRestorer {
  const pattern = Buffer.from(JSON.stringify(id), 'utf8');
  const replacement = Buffer.from(callerIdText, 'utf8');
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
      // The longest end of what is left that could begin the id is held for the next chunk.
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
 * Whether an answer's bytes are its text (no content encoding): only then is the id restored.
 * The gateway asks for an unencoded answer whenever it sends its own id (as it does for any
 * metered one); an upstream that compresses anyway is answered as it answered.
 */
export function plainAnswer(headers: IncomingHttpHeaders): boolean {
  return String(headers['content-encoding'] ?? 'identity').toLowerCase() === 'identity';
}
