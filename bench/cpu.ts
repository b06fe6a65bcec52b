// CPU time of processes, from /proc (Linux): how much each part of a stack spends per unit of
// work, so a benchmark can say where the time goes and not only how long it took.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** User + system CPU milliseconds a process has used so far (0 once it is gone). */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces), from field 3 on: utime is 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** The processes whose command line contains every one of `parts`. */
export function findPids(...parts: string[]): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (parts.every((p) => cmdline.includes(p))) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** CPU milliseconds per named group of processes; `pids` is asked again at each snapshot (pools change). */
export type CpuGroups = Record<string, () => number[] | Promise<number[]>>;

export async function cpuSnapshot(groups: CpuGroups): Promise<Map<string, Map<number, number>>> {
  const snapshot = new Map<string, Map<number, number>>();
  for (const [name, pids] of Object.entries(groups))
    snapshot.set(name, new Map((await pids()).map((pid) => [pid, processCpuMs(pid)])));
  return snapshot;
}

/** CPU milliseconds each group used between two snapshots (processes present in both). */
export function cpuBetween(
  before: Map<string, Map<number, number>>,
  after: Map<string, Map<number, number>>,
): Map<string, number> {
  const used = new Map<string, number>();
  for (const [name, end] of after) {
    const start = before.get(name) ?? new Map<number, number>();
    let sum = 0;
    for (const [pid, ms] of end) if (start.has(pid)) sum += ms - start.get(pid)!;
    used.set(name, sum);
  }
  return used;
}

/**
 * CPU milliseconds per unit of `work` (which does `units` of it), per group: null for a group
 * that had no process in both snapshots, so a table says "n/a" instead of a misleading 0.
 * /proc counts whole clock ticks (10 ms) per process: the figures are that coarse over `units`.
 */
export async function cpuPerUnit(
  groups: CpuGroups,
  units: number,
  work: () => Promise<void>,
): Promise<Map<string, number | null>> {
  const before = await cpuSnapshot(groups);
  await work();
  const after = await cpuSnapshot(groups);
  const used = cpuBetween(before, after);
  const measured = (name: string) => [...(after.get(name)?.keys() ?? [])].some((pid) => before.get(name)?.has(pid));
  return new Map([...used].map(([name, ms]) => [name, measured(name) ? ms / units : null]));
}

/** A figure of cpuPerUnit as a table cell. */
export const cpuCell = (ms: number | null | undefined, digits: number) => (ms == null ? 'n/a' : ms.toFixed(digits));
