// The x402 MCP transport's receipt: a call paid in `params._meta["x402/payment"]` and settled
// gets its SettleResponse in the JSON-RPC result's `_meta["x402/payment-response"]` (beside the
// PAYMENT-RESPONSE header, set as for any v2 payment). The upstream's answer passes through a
// transform that holds back only the one JSON-RPC response it looks for, never more than
// MAX_HELD_BYTES:
// - application/json: the whole body (one JSON-RPC response to one request), parsed, the key
//   added to `result._meta`, re-serialized (numbers as the upstream wrote them);
// - text/event-stream: events pass as they complete; the first whose data is the JSON-RPC
//   response to this request (same id, a `result`) is re-written with the key; everything after
//   it passes untouched and unparsed.
// Anything else, an encoded (compressed) body, a body or event over the bound, a JSON-RPC
// error, or an answer that is not the response to this request, passes unchanged: the
// PAYMENT-RESPONSE header still carries the receipt.
import { Transform, pipeline, type Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import type { ProxyCall } from './call.ts';
import { parseKeepingNumbers } from './parse.ts';
import type { SettleResponseV2 } from '../../x402/v2.ts';

/** What is held back to find the response: one tools/call result, as MCP servers answer it. */
const MAX_HELD_BYTES = 1024 * 1024;

const RESPONSE_META_KEY = 'x402/payment-response';

type Receipt = { rpcId: string | number; receipt: SettleResponseV2 };

/**
 * A wrapper adding the receipt to the upstream's answer, or null when this answer is not one
 * to add it to. The caller drops the upstream's Content-Length when it wraps.
 */
export function mcpReceiptInjector(
  call: Pick<ProxyCall, 'mcp' | 'payment'>,
  headers: IncomingHttpHeaders,
): ((body: Readable) => Readable) | null {
  const receipt = call.payment?.metaResponse;
  const rpcId = call.mcp?.rpcId;
  if (!receipt || rpcId === undefined) return null;
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
    const transform = make({ rpcId, receipt });
    // Errors (an upstream that breaks off, a body timeout) reach the transform with their cause.
    pipeline(body, transform, () => undefined);
    return transform;
  };
}

/** The response with the receipt in `result._meta`, or null when it is not this request's result. */
function withReceipt(text: string, { rpcId, receipt }: Receipt): string | null {
  let parsed: unknown;
  try {
    parsed = parseKeepingNumbers(text);
  } catch {
    return null;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return null;
  const response = parsed as { id?: unknown; result?: unknown };
  // Numbers come back as raw JSON (parseKeepingNumbers): ids are compared as written.
  if (JSON.stringify(response.id) !== JSON.stringify(rpcId)) return null;
  if (!response.result || typeof response.result !== 'object' || Array.isArray(response.result)) return null;
  const result = response.result as { _meta?: unknown };
  const meta = result._meta && typeof result._meta === 'object' && !Array.isArray(result._meta) ? result._meta : {};
  return JSON.stringify({ ...response, result: { ...result, _meta: { ...meta, [RESPONSE_META_KEY]: receipt } } });
}

function jsonInjector(target: Receipt): Transform {
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
      const injected = withReceipt(body.toString('utf8'), target);
      callback(null, injected === null ? body : Buffer.from(injected, 'utf8'));
    },
  });
}

/** An event ends at a blank line (LF or CRLF line ends). */
const EVENT_END = /\r?\n\r?\n/;

function sseInjector(target: Receipt): Transform {
  let pending = Buffer.alloc(0);
  let passing = false;
  /** The event re-written with the receipt, or null when it is not the response to this request. */
  const rewrite = (event: string): string | null => {
    const lines = event.split(/\r?\n/);
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length === 0) return null;
    const injected = withReceipt(data.join('\n'), target);
    if (injected === null) return null;
    return [...lines.filter((l) => !l.startsWith('data:')), `data: ${injected}`].join('\n');
  };
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      if (passing) return callback(null, chunk);
      pending = Buffer.concat([pending, chunk]);
      const out: Buffer[] = [];
      // latin1 keeps one character per byte, so indexes found in the text are byte offsets.
      for (let match = EVENT_END.exec(pending.toString('latin1')); match;) {
        const end = match.index + match[0].length;
        const event = pending.subarray(0, match.index).toString('utf8');
        const rewritten = rewrite(event);
        out.push(rewritten === null ? pending.subarray(0, end) : Buffer.from(`${rewritten}\n\n`, 'utf8'));
        pending = pending.subarray(end);
        if (rewritten !== null) {
          passing = true;
          out.push(pending);
          pending = Buffer.alloc(0);
          break;
        }
        match = EVENT_END.exec(pending.toString('latin1'));
      }
      if (!passing && pending.length > MAX_HELD_BYTES) {
        passing = true;
        out.push(pending);
        pending = Buffer.alloc(0);
      }
      callback(null, out.length > 0 ? Buffer.concat(out) : undefined);
    },
    flush(callback) {
      callback(null, pending.length > 0 ? pending : undefined);
    },
  });
}
