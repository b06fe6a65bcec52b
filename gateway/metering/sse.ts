// Server-sent events read from bytes as they pass, for the ones a reader wants (by default those
// that may report usage; an MCP answer's watch wants those that may say a request failed). It runs
// on the streaming hot path, so it is linear in the bytes and bounded in memory:
// - each byte is looked at a constant number of times (line ends are found with indexOf, each
//   search resumed past the last end found; a line that spans chunks and an event's data lines
//   are gathered in a buffer that grows by doubling, ./bytes.ts);
// - only what an unfinished line or event needs is kept, at most `maxBytes` of each: a longer
//   line is dropped as it arrives and spoils only its own event;
// - an event is decoded and handed on only when one of its `data:` lines is wanted: for usage,
//   one holding `"usage"` followed by an object (OpenAI's chunks carry `"usage":null` until the
//   last, which is skipped here).
// Lines end in CRLF, LF or CR, a leading BOM is dropped, and an event's data lines are joined by
// LF (the SSE specification, WHATWG HTML §9.2.6). Bytes, not text: a line end byte never occurs
// inside a UTF-8 sequence, so a chunk split inside one needs nothing special.
import { BoundedBytes } from './bytes.ts';

const CR = 0x0d;
const LF = 0x0a;
const SPACE = 0x20;
const USAGE_KEY = Buffer.from('"usage"');
const NEWLINE = Buffer.from('\n');
const EMPTY = Buffer.alloc(0);

function isWhitespace(byte: number | undefined): boolean {
  return byte === SPACE || byte === 0x09 || byte === LF || byte === CR;
}

/**
 * Whether JSON text may hold a `"usage"` key whose value is an object: the key, a colon and a
 * brace, or the key at the end of the text, where the next data line of its event may go on.
 */
export function holdsUsageObject(bytes: Buffer): boolean {
  for (let at = bytes.indexOf(USAGE_KEY); at !== -1; at = bytes.indexOf(USAGE_KEY, at + USAGE_KEY.length)) {
    let i = at + USAGE_KEY.length;
    while (isWhitespace(bytes[i])) i++;
    if (i === bytes.length) return true;
    if (bytes[i] !== 0x3a) continue;
    i++;
    while (isWhitespace(bytes[i])) i++;
    if (i === bytes.length || bytes[i] === 0x7b) return true;
  }
  return false;
}

/** `data:` or a bare `data` line (whose value is empty). */
function dataValue(line: Buffer): Buffer | null {
  if (line.length < 4 || line[0] !== 0x64 || line[1] !== 0x61 || line[2] !== 0x74 || line[3] !== 0x61) return null;
  if (line.length === 4) return line.subarray(4);
  if (line[4] !== 0x3a) return null;
  return line.subarray(line[5] === SPACE ? 6 : 5);
}

export class SseEvents {
  /** The line still arriving, copied from the chunks it came in. */
  private readonly line: BoundedBytes;
  /** The last chunk ended in CR: an LF first in the next belongs to that line end. */
  private afterCR = false;
  private firstLine = true;
  /** The event still arriving: its data lines, joined by LF. */
  private readonly data: BoundedBytes;
  private dataLines = 0;
  /** A line of the event was too long to keep: the event cannot be read whole. */
  private spoiled = false;
  private wantedEvent = false;
  private readonly onEvent: (data: string) => void;
  /** Whether a data line makes its event worth decoding. */
  private readonly wants: (line: Buffer) => boolean;

  constructor(maxBytes: number, onEvent: (data: string) => void, wants: (line: Buffer) => boolean = holdsUsageObject) {
    this.line = new BoundedBytes(maxBytes);
    this.data = new BoundedBytes(maxBytes);
    this.onEvent = onEvent;
    this.wants = wants;
  }

  push(chunk: Buffer): void {
    const n = chunk.length;
    let i = 0;
    if (this.afterCR && n > 0) {
      this.afterCR = false;
      if (chunk[0] === LF) i = 1;
    }
    let start = i;
    let cr = chunk.indexOf(CR, i);
    let lf = chunk.indexOf(LF, i);
    for (;;) {
      if (cr !== -1 && cr < i) cr = chunk.indexOf(CR, i);
      if (lf !== -1 && lf < i) lf = chunk.indexOf(LF, i);
      const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
      if (end === -1) break;
      this.endLine(chunk.subarray(start, end));
      if (chunk[end] === CR && end + 1 === n) this.afterCR = true;
      i = chunk[end] === CR && chunk[end + 1] === LF ? end + 2 : end + 1;
      start = i;
    }
    if (start < n) this.line.append(chunk.subarray(start));
  }

  /** The body ended: a last line or event without its line end is read as if it had one. */
  end(): void {
    if (this.line.length > 0 || this.line.over) this.endLine(EMPTY);
    this.dispatch();
  }

  /** A line ends with these bytes (the rest of it, if any, held in `line`). */
  private endLine(tail: Buffer): void {
    let whole: Buffer | null = tail;
    if (this.line.length > 0 || this.line.over) {
      this.line.append(tail);
      whole = this.line.over ? null : this.line.view();
    }
    this.takeLine(whole);
    this.line.reset();
  }

  private takeLine(line: Buffer | null): void {
    if (line === null) {
      this.spoiled = true;
      return;
    }
    if (this.firstLine) {
      this.firstLine = false;
      if (line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) line = line.subarray(3);
    }
    if (line.length === 0) {
      this.dispatch();
      return;
    }
    const value = dataValue(line);
    if (value === null || this.spoiled) return;
    if (this.dataLines++ > 0) this.data.append(NEWLINE);
    this.data.append(value);
    if (this.data.over) this.spoiled = true;
    else if (!this.wantedEvent && this.wants(value)) this.wantedEvent = true;
  }

  private dispatch(): void {
    const read = this.wantedEvent && !this.spoiled && this.dataLines > 0;
    const text = read ? this.data.view().toString('utf8') : '';
    this.data.reset();
    this.dataLines = 0;
    this.spoiled = false;
    this.wantedEvent = false;
    if (read) this.onEvent(text);
  }
}
