// CPU per settle, by process, for bench/settle.ts: where each side's work goes. Ours and the
// reference run in one process and are measured interleaved for latency, so their CPU is
// measured in two blocks instead: `count` of ours in a row, then, once their after-answer work
// (the record, the workflow) is done, `count` of the reference.
import { cpuBetween, cpuSnapshot, type CpuGroups } from './cpu.ts';
import type { Table } from './result.ts';

export type SettleCpuOptions = {
  count: number;
  ours: () => Promise<unknown>;
  reference: () => Promise<unknown>;
  groups: CpuGroups;
  /** Resolves once nothing of ours is left to run after its answers (no settlement workflow running). */
  settled: () => Promise<void>;
};

async function perSettle(
  count: number,
  groups: CpuGroups,
  run: () => Promise<unknown>,
  after: () => Promise<void>,
): Promise<Map<string, number>> {
  const before = await cpuSnapshot(groups);
  for (let i = 0; i < count; i++) await run();
  await after();
  const used = cpuBetween(before, await cpuSnapshot(groups));
  return new Map([...used].map(([name, ms]) => [name, ms / count]));
}

/** The table: one row per process group, ours and the reference side by side (ms per settle). */
export async function settleCpuTable(opts: SettleCpuOptions): Promise<Table> {
  const ours = await perSettle(opts.count, opts.groups, opts.ours, opts.settled);
  const reference = await perSettle(opts.count, opts.groups, opts.reference, async () => undefined);
  const fmt = (v: number) => v.toFixed(2);
  const signed = (v: number) => `${v >= 0 ? '+' : ''}${fmt(v)}`;
  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
  const row = (name: string, a: number, b: number) => [name, fmt(a), fmt(b), signed(a - b)];
  return {
    title: `CPU per settle, by process (ms; user + system; ${opts.count} of ours in a row, their workflows done, then ${opts.count} of the reference)`,
    header: ['process', 'ours: POST /settle', 'reference: x402 settle()', 'difference'],
    rows: [
      ...Object.keys(opts.groups).map((name) => row(name, ours.get(name) ?? 0, reference.get(name) ?? 0)),
      row('total', total(ours), total(reference)),
    ],
  };
}
