// CPU per settle, by process, for bench/settle.ts: where each side's work goes. Ours and the
// reference run in one process and are measured interleaved for latency, so their CPU is
// measured in blocks instead, in the order ours, reference, reference, ours (half of `count`
// each), so that work one block leaves behind (a collection, a late write) lands on both sides
// alike. A block of ours ends once its settlements' workflows have closed: the record and the
// workflow follow each answer.
import { cpuCell, cpuPerUnit, type CpuGroups } from './cpu.ts';
import type { Table } from './result.ts';

export type SettleCpuOptions = {
  /** Settles per side (even). */
  count: number;
  ours: () => Promise<unknown>;
  reference: () => Promise<unknown>;
  groups: CpuGroups;
  /** Resolves once every settlement of ours sent so far has its workflow closed. */
  settled: () => Promise<void>;
};

type Figures = Map<string, number | null>;

const add = (a: Figures, b: Figures): Figures =>
  new Map([...a].map(([name, v]) => [name, v === null || b.get(name) == null ? null : v + b.get(name)!]));

export async function settleCpuTable(opts: SettleCpuOptions): Promise<Table> {
  const half = opts.count / 2;
  // Each block starts once the workflows of earlier settles of ours have closed (not counted),
  // and a block of ours ends once its own have (counted); a block of the reference waits for nothing.
  const block = async (run: () => Promise<unknown>, isOurs: boolean) => {
    await opts.settled();
    return cpuPerUnit(opts.groups, opts.count, async () => {
      for (let i = 0; i < half; i++) await run();
      if (isOurs) await opts.settled();
    });
  };
  const ours1 = await block(opts.ours, true);
  const reference1 = await block(opts.reference, false);
  const reference2 = await block(opts.reference, false);
  const ours2 = await block(opts.ours, true);
  const ours = add(ours1, ours2);
  const reference = add(reference1, reference2);

  const signed = (v: number) => `${v >= 0 ? '+' : ''}${v.toFixed(1)}`;
  const row = (name: string, a: number | null, b: number | null) => [
    name,
    cpuCell(a, 1),
    cpuCell(b, 1),
    a === null || b === null ? 'n/a' : signed(a - b),
  ];
  const total = (m: Figures) => [...m.values()].reduce<number>((sum, v) => sum + (v ?? 0), 0);
  return {
    title: `CPU per settle, by process (ms; user + system, counted by /proc in 10 ms ticks; ${half} of ours, ${half} of the reference, ${half} of the reference, ${half} of ours)`,
    header: ['process', 'ours: POST /settle', 'reference: x402 settle()', 'difference'],
    rows: [
      ...Object.keys(opts.groups).map((name) => row(name, ours.get(name) ?? null, reference.get(name) ?? null)),
      row('total (groups measured)', total(ours), total(reference)),
    ],
  };
}
