// What a chaos scenario is and how it reports: the scenario contract run.ts loads, the check
// that turns a violated invariant into the scenario's failure, and the tallies its one-line
// summary is made of.

export type ChaosScenario = {
  name: string;
  description: string;
  /** Resolves to a one-line summary (the counts that prove the claim); throws on a violated invariant. */
  run: () => Promise<string>;
};

/** Throws the scenario's failure when `ok` is false. */
export function check(ok: boolean, message: string): asserts ok {
  if (!ok) throw new Error(message);
}

/** Counts values: `{a: 3, b: 1}`. */
export function tally(values: Iterable<string>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}

export const formatTally = (t: Record<string, number>) =>
  Object.entries(t)
    .sort()
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
