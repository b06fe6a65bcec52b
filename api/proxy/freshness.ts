// How fresh the gate's caches must be for a call (GATE_CACHE_FRESHNESS):
// - `strict` (default): before the caches answer, one round trip on the change feed's LISTEN
//   connection, sent after the call arrived (shared by concurrent calls), so every agent or
//   policy change committed before the call is in force for it, on every replica.
// - `notify`: no round trip; the caches are as fresh as the notifications that have arrived.
//   A write through the API answers only once PostgreSQL has dispatched its notification to
//   every listener, so what remains is a window of about a notification's delivery (well
//   under a millisecond on one host) in which another replica may still serve the old agent
//   or policy; a write made in SQL behind the API's back has no such wait.
// The trade (bench:proxy, loaded 2-vCPU machine): strict costs about half of what the caches
// gained in throughput; docs/PROXY.md has the figures.
import { z } from 'zod';

const FreshnessEnv = z.object({ GATE_CACHE_FRESHNESS: z.enum(['strict', 'notify']).default('strict') });

export type GateFreshness = 'strict' | 'notify';

export function loadGateFreshness(env: NodeJS.ProcessEnv): GateFreshness {
  const parsed = FreshnessEnv.safeParse(env);
  if (!parsed.success) throw new Error('invalid configuration: GATE_CACHE_FRESHNESS must be strict or notify');
  return parsed.data.GATE_CACHE_FRESHNESS;
}

export const gateFreshness: GateFreshness = loadGateFreshness(process.env);
