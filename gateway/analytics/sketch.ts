// The reading half of the rollup histograms written by the analytics_sketch_index SQL
// function (migration Migration20261122100100_analytics): bucket index ↔ value, merging, and
// nearest-rank percentiles. Values below 128 have a bucket each (exact); above, 64 buckets
// per power of two, reported at their midpoint: within 1/128 (0.8 %) of every value in them.

/** A histogram as stored: bucket index (decimal string) → sample count. */
export type Sketch = Record<string, number>;

const EXACT = 128;
const SUB_BUCKETS = 64;

/** The value a bucket reports: the value itself below 128, else the bucket's midpoint (rounded down). */
function sketchValue(index: number): number {
  if (index < EXACT) return index;
  const k = index - EXACT;
  const shift = Math.floor(k / SUB_BUCKETS) + 1; // e - 6
  const lo = (SUB_BUCKETS + (k % SUB_BUCKETS)) * 2 ** shift;
  return lo + Math.floor((2 ** shift - 1) / 2);
}

/** Adds `from` into `into` (the merge of two histograms is the sum of their counts). */
export function mergeSketch(into: Sketch, from: Sketch): Sketch {
  for (const key in from) into[key] = (into[key] ?? 0) + Number(from[key]);
  return into;
}

export type Percentiles = { p50: number | null; p95: number | null; p99: number | null };

const QUANTILES = [0.5, 0.95, 0.99] as const;

/**
 * Nearest-rank percentiles: the p-th percentile of n samples is the ceil(p·n)-th smallest.
 * Bucket indexes are canonical integer strings, which JavaScript objects enumerate in
 * ascending numeric order, so one pass in key order walks the histogram from the bottom.
 */
export function percentiles(sketch: Sketch): Percentiles {
  let total = 0;
  for (const key in sketch) total += Number(sketch[key]);
  if (total === 0) return { p50: null, p95: null, p99: null };
  const ranks = QUANTILES.map((q) => Math.max(1, Math.ceil(q * total)));
  const found: number[] = [];
  let seen = 0;
  for (const key in sketch) {
    seen += Number(sketch[key]);
    while (found.length < ranks.length && seen >= ranks[found.length]) found.push(sketchValue(Number(key)));
    if (found.length === ranks.length) break;
  }
  return { p50: found[0], p95: found[1], p99: found[2] };
}

/** Brute-force nearest-rank percentile of raw samples (the reference the tests hold the sketch to). */
export function exactPercentile(sorted: number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.max(1, Math.ceil(q * sorted.length)) - 1];
}
