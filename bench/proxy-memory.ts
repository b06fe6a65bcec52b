// Part 3 of the proxy bench: a process's RSS while N streams of M MiB pass through it both ways
// at once, the gateway beside the bare proxy for reference.
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startStep } from '../scripts/lib/progress.ts';
import { say } from './print.ts';
import type { BenchResult } from './result.ts';

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** `STREAMS` concurrent streams of STREAM_BYTES up through `url`, echoed back down; returns the peak RSS growth of `pid`. */
async function memoryUnderStreams(
  url: string,
  headers: Record<string, string>,
  pid: number,
  STREAMS: number,
  STREAM_BYTES: number,
): Promise<{ baseline: number; peak: number; seconds: number }> {
  const chunk = Buffer.alloc(64 * 1024, 'm');
  const baseline = rssMiB(pid);
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 25);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: STREAMS }, async () => {
      const body = Readable.from(
        (function* () {
          for (let sent = 0; sent < STREAM_BYTES; sent += chunk.length) yield chunk;
        })(),
      );
      const res = await request(url, { method: 'POST', headers: { ...headers, 'x-echo': '1' }, body });
      let got = 0;
      for await (const c of res.body) got += c.length;
      if (got !== STREAM_BYTES) throw new Error(`stream returned ${got} of ${STREAM_BYTES} bytes`);
    }),
  );
  clearInterval(sampler);
  return { baseline, peak, seconds: (performance.now() - started) / 1000 };
}

export type StreamMemory = Awaited<ReturnType<typeof memoryUnderStreams>>;
type Endpoint = { url: string; headers: Record<string, string>; pid: number };

/** Streams through the bare proxy, then the gateway; returns the gateway's figures. */
export async function runMemory(
  bare: Endpoint,
  gateway: Endpoint,
  options: { streams: number; streamBytes: number },
  result: BenchResult,
): Promise<StreamMemory> {
  const { streams: STREAMS, streamBytes: STREAM_BYTES } = options;
  const memoryStep = startStep(
    'proxy: memory',
    `${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB, bare proxy then gateway`,
  );
  const bareMem = await memoryUnderStreams(bare.url, bare.headers, bare.pid, STREAMS, STREAM_BYTES);
  const gwMem = await memoryUnderStreams(gateway.url, gateway.headers, gateway.pid, STREAMS, STREAM_BYTES);
  memoryStep.end();
  say();
  say(`## RSS while ${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB pass through (up and echoed down)`);
  say(`| process | baseline | peak | growth | wall time |`);
  say(`|---|---|---|---|---|`);
  say(
    `| bare proxy | ${bareMem.baseline.toFixed(0)} MiB | ${bareMem.peak.toFixed(0)} MiB | ${(bareMem.peak - bareMem.baseline).toFixed(1)} MiB | ${bareMem.seconds.toFixed(1)} s |`,
  );
  say(
    `| gateway | ${gwMem.baseline.toFixed(0)} MiB | ${gwMem.peak.toFixed(0)} MiB | ${(gwMem.peak - gwMem.baseline).toFixed(1)} MiB | ${gwMem.seconds.toFixed(1)} s |`,
  );
  const memRow = (name: string, m: typeof bareMem) => [
    name,
    `${m.baseline.toFixed(0)} MiB`,
    `${m.peak.toFixed(0)} MiB`,
    `${(m.peak - m.baseline).toFixed(1)} MiB`,
    `${m.seconds.toFixed(1)} s`,
  ];
  result.tables.push({
    title: `RSS while ${STREAMS} streams × ${STREAM_BYTES / 1048576} MiB pass through (up and echoed down)`,
    header: ['process', 'baseline', 'peak', 'growth', 'wall time'],
    rows: [memRow('bare proxy', bareMem), memRow('gateway', gwMem)],
  });
  const growth = gwMem.peak - gwMem.baseline;
  const bareGrowth = bareMem.peak - bareMem.baseline;
  result.checks.push({
    figure: 'RSS growth, gateway',
    measured: `${growth.toFixed(1)} MiB`,
    baseline: `bare proxy ${bareGrowth.toFixed(1)} MiB`,
    ratio: `${(growth / bareGrowth).toFixed(2)}×`,
    target: "≤ the bare proxy's + 16 MiB",
    pass: growth <= bareGrowth + 16,
  });
  return gwMem;
}
