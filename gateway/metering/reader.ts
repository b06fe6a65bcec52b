// Reads a metered call's answer as it passes, without changing or holding it up: the streaming
// relay and the transactional activity hand it the response headers, then every body chunk, then
// the end, and ask for the reading (./charge.ts turns it into the charge).
// - A header meter reads its header; the body is not looked at.
// - A tokens meter reads the usage the answer reports (./usage.ts): a `text/event-stream` answer
//   event by event (./sse.ts), a JSON answer (`application/json`, `application/*+json`, or no
//   content type) whole at its end, when it is at most `maxBytes` (a larger one gives no
//   reading). A compressed answer (any Content-Encoding but identity) or another content type
//   gives no reading: whoever forwards a tokens-metered call asks for `accept-encoding: identity`.
// Memory is bounded by `maxBytes`, whatever the upstream sends.
import type { ChargeMeter } from './meter.ts';
import { BoundedBytes } from './bytes.ts';
import { holdsUsageObject, SseEvents } from './sse.ts';
import { UsageTracker } from './usage.ts';

export type MeterReading =
  { kind: 'none' } | { kind: 'usage'; input: number; output: number } | { kind: 'amount'; amount: bigint };

/** Response headers as node and undici give them (names in any case). */
export type ResponseHeaders = Readonly<Record<string, string | string[] | undefined>>;

export type MeterReader = {
  onHeaders(headers: ResponseHeaders): void;
  /** A body chunk as it passes; the reader keeps no reference to it beyond what it copies. */
  onChunk(chunk: Uint8Array): void;
  /** The body ended, whole or broken off. */
  onEnd(): void;
  reading(): MeterReading;
};

export type MeterReaderOptions = {
  /** The most the reader holds: an unfinished SSE line or event, or a JSON answer. */
  maxBytes: number;
};

/** What a JSON answer of up to this many bytes holds is read; an LLM's answer is far smaller. */
export const DEFAULT_METER_MAX_BYTES = 4 * 1024 * 1024;

const NONE: MeterReading = { kind: 'none' };
const UINT256_MAX = (1n << 256n) - 1n;

function headerValue(headers: ResponseHeaders, name: string): string | string[] | undefined {
  const exact = headers[name];
  if (exact !== undefined) return exact;
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value;
  return undefined;
}

/**
 * An amount a header states: one decimal integer (leading zeros allowed, spaces and tabs around
 * it ignored as HTTP's optional whitespace) that fits uint256; anything else (a sign, a decimal
 * point, an exponent, hex, a list of values, a repeated header) is no reading.
 */
export function amountOfHeader(value: string | string[] | undefined): bigint | null {
  const text = Array.isArray(value) ? (value.length === 1 ? value[0] : undefined) : value;
  if (text === undefined || text.length > 256) return null;
  const digits = /^[ \t]*([0-9]+)[ \t]*$/.exec(text)?.[1];
  if (digits === undefined) return null;
  const amount = BigInt(digits);
  return amount <= UINT256_MAX ? amount : null;
}

/** A chunk as a Buffer over the same bytes (no copy). */
export function bytesOf(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

export function createMeterReader(meter: ChargeMeter, options: MeterReaderOptions): MeterReader {
  if (meter.kind === 'ceiling') return nothingRead;
  return meter.kind === 'header' ? headerReader(meter.header.toLowerCase()) : tokensReader(options.maxBytes);
}

/** The reader of a call charged its ceiling: it reads nothing. */
const nothingRead: MeterReader = { onHeaders() {}, onChunk() {}, onEnd() {}, reading: () => NONE };

function headerReader(name: string): MeterReader {
  let reading = NONE;
  return {
    onHeaders(headers) {
      const amount = amountOfHeader(headerValue(headers, name));
      reading = amount === null ? NONE : { kind: 'amount', amount };
    },
    onChunk() {},
    onEnd() {},
    reading: () => reading,
  };
}

type BodyKind = 'sse' | 'json' | 'unread';

/** How an answer's body can be read: SSE, JSON (or no content type), or not (compressed, another type). */
export function bodyKindOf(headers: ResponseHeaders): BodyKind {
  const encoding = headerValue(headers, 'content-encoding');
  if (encoding !== undefined && String(encoding).trim().toLowerCase() !== 'identity') return 'unread';
  const type = headerValue(headers, 'content-type');
  if (type === undefined) return 'json';
  const essence = String(type).split(';')[0].trim().toLowerCase();
  if (essence === 'text/event-stream') return 'sse';
  if (essence === 'application/json' || /^application\/[^/]*\+json$/.test(essence)) return 'json';
  return 'unread';
}

function tokensReader(maxBytes: number): MeterReader {
  const usage = new UsageTracker();
  const see = (text: string) => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return; // not JSON (a `[DONE]`, a broken-off last event): reports nothing
    }
    usage.see(value);
  };
  let kind: BodyKind = 'unread';
  let events: SseEvents | undefined;
  // A JSON answer, while it fits.
  const json = new BoundedBytes(maxBytes);
  return {
    onHeaders(headers) {
      kind = bodyKindOf(headers);
      if (kind === 'sse') events = new SseEvents(maxBytes, see);
    },
    onChunk(chunk) {
      if (kind === 'sse') events?.push(bytesOf(chunk));
      else if (kind === 'json') json.append(chunk);
    },
    onEnd() {
      if (kind === 'sse') events?.end();
      else if (kind === 'json' && !json.over) {
        let body = json.view();
        if (body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf) body = body.subarray(3);
        if (holdsUsageObject(body)) see(body.toString('utf8'));
        json.reset();
      }
    },
    reading() {
      const current = usage.current();
      return current === null ? NONE : { kind: 'usage', input: current.input, output: current.output };
    },
  };
}
