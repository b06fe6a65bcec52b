// Bytes gathered from many chunks into one buffer of our own, up to a bound: growing by doubling
// keeps appending linear, and one buffer keeps a trickle of tiny chunks from costing an object
// each. Past the bound it holds nothing and says so (`over`).

/** A buffer this large or smaller is kept for reuse after a reset; a larger one is let go. */
const KEEP_BYTES = 64 * 1024;

export class BoundedBytes {
  private buffer = Buffer.alloc(0);
  private size = 0;
  /** The bytes appended outgrew the bound; set until reset. */
  over = false;
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  get length(): number {
    return this.size;
  }

  append(bytes: Uint8Array): void {
    if (this.over) return;
    const needed = this.size + bytes.length;
    if (needed > this.limit) {
      this.over = true;
      this.size = 0;
      if (this.buffer.length > KEEP_BYTES) this.buffer = Buffer.alloc(0);
      return;
    }
    if (needed > this.buffer.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.limit, Math.max(needed, 2 * this.buffer.length, 256)));
      this.buffer.copy(grown, 0, 0, this.size);
      this.buffer = grown;
    }
    this.buffer.set(bytes, this.size);
    this.size = needed;
  }

  /** The bytes appended, a view valid until the next append or reset. */
  view(): Buffer {
    return this.buffer.subarray(0, this.size);
  }

  reset(): void {
    this.size = 0;
    this.over = false;
    if (this.buffer.length > KEEP_BYTES) this.buffer = Buffer.alloc(0);
  }
}
