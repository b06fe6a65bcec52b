// How fresh the gate's caches must be for a call (GATE_CACHE_FRESHNESS):
// - `acknowledged` (default): no round trip on the call's path. Every agent or policy change
//   made through the API is in force on every replica before the API answers it (the writer
//   waits for each replica's acknowledgement, or for its lease to run out: db/change-feed.ts);
//   a change made in SQL behind the API's back is in force on each replica as its notification
//   arrives (milliseconds on one host).
// - `strict`: additionally one round trip on the change feed's LISTEN connection per call, sent
//   after the call arrived (shared by concurrent calls), so every change committed before the
//   call, in SQL too, is in force for it. It costs the round trip on every call
//   (docs/PROXY.md has the figures).
import { z } from 'zod';

export type GateFreshness = 'strict' | 'acknowledged';

const FreshnessEnv = z.object({ GATE_CACHE_FRESHNESS: z.enum(['strict', 'acknowledged']).default('acknowledged') });

export function loadGateFreshness(env: NodeJS.ProcessEnv): GateFreshness {
  const parsed = FreshnessEnv.safeParse(env);
  if (!parsed.success) throw new Error('invalid configuration: GATE_CACHE_FRESHNESS must be acknowledged or strict');
  return parsed.data.GATE_CACHE_FRESHNESS;
}
