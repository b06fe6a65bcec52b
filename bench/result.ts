// The structured result every benchmark returns besides what it prints, so `npm run bench`
// (bench/run.ts) can put all of them in one report (bench/report.ts).
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';

/** A table as printed: header cells and rows of already formatted cells. */
export type Table = { title: string; header: string[]; rows: string[][] };

/** One figure against its baseline from the same run, and the target it is held to. */
export type Check = {
  /** What is measured, e.g. "streaming c=1: added p50". */
  figure: string;
  /** The measured figure, formatted ("4.25 ms"). */
  measured: string;
  /** The baseline it is compared with, named and formatted ("direct 0.41 ms"). */
  baseline: string;
  /** The comparison, formatted ("+3.84 ms", "1.86×", "25 %"). */
  ratio: string;
  /** The target, as docs/BENCHMARKS.md states it ("≤ 1.3× the bare start"). */
  target: string;
  /** null: reported for information, no target. */
  pass: boolean | null;
};

export type BenchResult = {
  /** The section id: proxy, settle, paid, analytics, throughput. */
  bench: string;
  /** The command line that produced it. */
  command: string;
  /** One line saying what was run (sizes, counts, settings). */
  setup: string;
  startedAt: string;
  seconds: number;
  tables: Table[];
  checks: Check[];
  /** Extra lines worth keeping with the figures (seeding time, load average, ...). */
  notes: string[];
  /** Set instead of figures when the benchmark failed. */
  error?: string;
};

export const passText = (pass: boolean | null) => (pass === null ? 'info' : pass ? 'pass' : 'MISS');

/** The table as Markdown lines (a benchmark's stdout): its title (after `titlePrefix`), then the table. */
export function tableLines(table: Table, titlePrefix = ''): string[] {
  return [
    `${titlePrefix}${table.title}`,
    `| ${table.header.join(' | ')} |`,
    `|${table.header.map(() => '---').join('|')}|`,
    ...table.rows.map((row) => `| ${row.join(' | ')} |`),
  ];
}

/** A result to fill in: the figures are added as the benchmark prints them. */
export function startResult(bench: string, command: string, setup: string): BenchResult {
  return { bench, command, setup, startedAt: new Date().toISOString(), seconds: 0, tables: [], checks: [], notes: [] };
}

/** Closes a result: its wall time and the load average the run ended under (figures on a busy machine carry noise). */
export function finishResult(result: BenchResult, startedMs: number): BenchResult {
  result.seconds = Math.round((performance.now() - startedMs) / 1000);
  result.notes.push(
    `load average at the end: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(', ')} (1, 5, 15 min; ${cpus().length} CPUs)`,
  );
  return result;
}

/**
 * Entry point of a benchmark file run directly: runs it with the command line's arguments,
 * and with `--json FILE` (stripped before the benchmark's own parsing) also writes its
 * structured result there for bench/run.ts.
 */
export async function runAsMain(run: (argv: string[]) => Promise<BenchResult>): Promise<void> {
  const argv = process.argv.slice(2);
  const at = argv.indexOf('--json');
  const jsonFile = at >= 0 ? argv[at + 1] : undefined;
  if (at >= 0) argv.splice(at, 2);
  const result = await run(argv);
  if (jsonFile) writeFileSync(jsonFile, JSON.stringify(result, null, 2));
}

/** Nearest-rank percentile (q in 0..1) of the samples, in any order; undefined when there are none. */
export function percentile(samples: readonly number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
