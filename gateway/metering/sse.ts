// Server-sent events read from bytes as they pass, for the ones that may report usage. It runs
// on the streaming hot path, so it is linear in the bytes and bounded in memory:
// - each byte is looked at a constant number of times (line ends are found with indexOf, each
//   search resumed past the last end found; a line that spans chunks is joined once);
// - only what an unfinished line or event needs is kept, at most `maxBytes` of each: a longer
//   line is dropped as it arrives and spoils only its own event;
// - an event is decoded and parsed only when one of its `data:` lines holds `"usage"` followed
//   by an object (OpenAI's chunks carry `"usage":null` until the last, which is skipped here).
// Lines end in CRLF, LF or CR, a leading BOM is dropped, and an event's data lines are joined by
// LF (the SSE specification, WHATWG HTML §9.2.6). Bytes, not text: a line end byte never occurs
// inside a UTF-8 sequence, so a chunk split inside one needs nothing special.

const CR = 0x0d;
const LF = 0x0a;
const SPACE = 0x20;
const USAGE_KEY = Buffer.from('"usage"');
const NEWLINE = Buffer.from('\n');

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

export class SseUsageEvents {
  // The line still arriving (parts of earlier chunks, copied), and whether it outgrew the bound.
  private lineParts: Buffer[] = [];
  private lineBytes = 0;
  private lineTooLong = false;
  /** The last chunk ended in CR: an LF first in the next belongs to that line end. */
  private afterCR = false;
  private firstLine = true;
  // The event still arriving: its data lines; from `borrowed` on they are views of the current chunk.
  private data: Buffer[] = [];
  private dataBytes = 0;
  private borrowed = 0;
  private spoiled = false;
  private mayHoldUsage = false;

  private readonly maxBytes: number;
  private readonly onEvent: (data: string) => void;

  constructor(maxBytes: number, onEvent: (data: string) => void) {
    this.maxBytes = maxBytes;
    this.onEvent = onEvent;
  }

  push(chunk: Buffer): void {
    const n = chunk.length;
    let i = 0;
    if (this.afterCR && n > 0) {
      this.afterCR = false;
      if (chunk[0] === LF) i = 1;
    }
    this.borrowed = this.data.length;
    let start = i;
    let cr = chunk.indexOf(CR, i);
    let lf = chunk.indexOf(LF, i);
    for (;;) {
      if (cr !== -1 && cr < i) cr = chunk.indexOf(CR, i);
      if (lf !== -1 && lf < i) lf = chunk.indexOf(LF, i);
      const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
      if (end === -1) break;
      this.endLine(chunk, start, end);
      if (chunk[end] === CR && end + 1 === n) this.afterCR = true;
      i = chunk[end] === CR && chunk[end + 1] === LF ? end + 2 : end + 1;
      start = i;
    }
    if (start < n) this.holdLinePart(chunk.subarray(start));
    // Nothing kept may point into the caller's chunk once this returns.
    for (let k = this.borrowed; k < this.data.length; k++) this.data[k] = Buffer.from(this.data[k]);
    this.borrowed = this.data.length;
  }

  /** The body ended: a last line or event without its line end is read as if it had one. */
  end(): void {
    if (this.lineBytes > 0 || this.lineTooLong) this.endLine(Buffer.alloc(0), 0, 0);
    this.dispatch();
  }

  private holdLinePart(part: Buffer): void {
    if (this.lineTooLong) return;
    if (this.lineBytes + part.length > this.maxBytes) {
      this.lineTooLong = true;
      this.lineParts = [];
      return;
    }
    this.lineParts.push(Buffer.from(part));
    this.lineBytes += part.length;
  }

  private endLine(chunk: Buffer, start: number, end: number): void {
    let line: Buffer | null;
    if (this.lineTooLong || this.lineBytes + (end - start) > this.maxBytes) line = null;
    else if (this.lineParts.length === 0) line = chunk.subarray(start, end);
    else line = Buffer.concat([...this.lineParts, chunk.subarray(start, end)]);
    this.lineParts = [];
    this.lineBytes = 0;
    this.lineTooLong = false;
    this.takeLine(line);
  }

  private takeLine(line: Buffer | null): void {
    if (line === null) {
      // Too long to keep: whatever it was, its event can no longer be read whole.
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
    const joined = this.dataBytes + value.length + (this.data.length > 0 ? 1 : 0);
    if (joined > this.maxBytes) {
      this.spoiled = true;
      this.data = [];
      return;
    }
    this.data.push(value);
    this.dataBytes = joined;
    if (!this.mayHoldUsage && holdsUsageObject(value)) this.mayHoldUsage = true;
  }

  private dispatch(): void {
    const { data, mayHoldUsage, spoiled } = this;
    this.data = [];
    this.dataBytes = 0;
    this.borrowed = 0;
    this.spoiled = false;
    this.mayHoldUsage = false;
    if (!mayHoldUsage || spoiled || data.length === 0) return;
    const parts = data.length === 1 ? data : data.flatMap((d, k) => (k === 0 ? [d] : [NEWLINE, d]));
    this.onEvent(Buffer.concat(parts).toString('utf8'));
  }
}
