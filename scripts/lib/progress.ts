// Long work (a first tool install, seeding, a benchmark, a chaos step) says what it does on
// stderr, so what a command prints on stdout stays clean for scripts: one line when a step
// starts, one when it ends with its duration. Long loops also report a count every few seconds,
// but only to a terminal: under tests or into a log file that would be noise, one line per step is enough.

const PROGRESS_EVERY_MS = 3000;

export type Step = {
  /** `done` of `total` `unit` so far; printed at most every few seconds, and only to a terminal. */
  progress(done: number, total: number, unit: string): void;
  /** The closing line: `<label>: done in 12.3 s`, with an optional note after it. */
  end(note?: string): void;
  /** The closing line of a step that threw: `<label>: failed after 12.3 s`. */
  fail(): void;
};

/** `12.3 s` below a minute, `4 min 05 s` above. */
function formatDuration(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
}

/** Starts a step: `<label> (<detail>) ...`; the detail (what and where) is on this first line only. */
export function startStep(label: string, detail?: string, out: NodeJS.WriteStream = process.stderr): Step {
  const t0 = performance.now();
  let lastProgress = t0;
  out.write(`${label}${detail ? ` (${detail})` : ''} ...\n`);
  return {
    progress(done, total, unit) {
      const now = performance.now();
      if (!out.isTTY || now - lastProgress < PROGRESS_EVERY_MS) return;
      lastProgress = now;
      const percent = total > 0 ? ` (${Math.floor((done / total) * 100)} %)` : '';
      out.write(`${label}: ${done.toLocaleString('en')} / ${total.toLocaleString('en')} ${unit}${percent}\n`);
    },
    end(note) {
      out.write(`${label}: done in ${formatDuration(performance.now() - t0)}${note ? `; ${note}` : ''}\n`);
    },
    fail() {
      out.write(`${label}: failed after ${formatDuration(performance.now() - t0)}\n`);
    },
  };
}

/** Runs `work` as one step: its start line, then its done (or failed) line with the duration. */
export async function timedStep<T>(
  label: string,
  detail: string | undefined,
  work: (step: Step) => Promise<T>,
): Promise<T> {
  const step = startStep(label, detail);
  try {
    const value = await work(step);
    step.end();
    return value;
  } catch (err) {
    step.fail();
    throw err;
  }
}
