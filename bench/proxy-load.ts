// The proxy bench's load: fixed-concurrency loops of 1 KiB POSTs against one target, and their
// samples merged into percentiles, throughput and CPU per call.
import { Pool } from 'undici';
import { cpuBetween, cpuSnapshot, type CpuGroups } from './cpu.ts';
import { percentile } from './result.ts';

export const BODY = Buffer.alloc(1024, 'b');

export type Target = {
  name: string;
  origin: string;
  path: string;
  headers: Record<string, string>;
  /** Before each window, outside its measures (e.g. the database's analytics mode). */
  prepare?: () => Promise<void>;
  /** At the end of each window, inside its CPU measure: work its calls left behind. */
  settle?: () => Promise<void>;
};
export type Sample = {
  latencies: number[];
  completed: number;
  errors: number;
  seconds: number;
  cpuMs: Map<string, number>;
};

/**
 * `concurrency` loops, each sending the next request as soon as its previous answer is read;
 * the CPU each group of `cpu` used meanwhile comes with the sample.
 */
export async function load(target: Target, seconds: number, concurrency: number, cpu: CpuGroups = {}): Promise<Sample> {
  await target.prepare?.();
  const cpuBefore = await cpuSnapshot(cpu);
  const pool = new Pool(target.origin, { connections: concurrency, pipelining: 1, keepAliveTimeout: 30_000 });
  const latencies: number[] = [];
  let errors = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        try {
          const res = await pool.request({
            path: target.path,
            method: 'POST',
            headers: { 'content-type': 'application/octet-stream', ...target.headers },
            body: BODY,
          });
          await res.body.arrayBuffer();
          if (res.statusCode !== 200) errors++;
          else latencies.push(performance.now() - t0);
        } catch {
          errors++;
        }
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  await target.settle?.();
  const cpuMs = cpuBetween(cpuBefore, await cpuSnapshot(cpu));
  await pool.close();
  return { latencies, completed: latencies.length, errors, seconds: elapsed, cpuMs };
}

export function merge(samples: Sample[]) {
  const all = samples.flatMap((s) => s.latencies).sort((a, b) => a - b);
  const completed = samples.reduce((a, s) => a + s.completed, 0);
  const seconds = samples.reduce((a, s) => a + s.seconds, 0);
  // CPU milliseconds per completed call, by process group.
  const cpuPerCall = new Map<string, number>();
  for (const s of samples)
    for (const [name, ms] of s.cpuMs) cpuPerCall.set(name, (cpuPerCall.get(name) ?? 0) + ms / Math.max(1, completed));
  return {
    p50: percentile(all, 0.5),
    p99: percentile(all, 0.99),
    rps: completed / seconds,
    errors: samples.reduce((a, s) => a + s.errors, 0),
    n: all.length,
    cpuPerCall,
  };
}
