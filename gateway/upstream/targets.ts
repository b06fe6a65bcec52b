// An agent's upstream URL parsed once, not on every call: its origin keys the breakers, the
// open circuits and the tenant connection slots, and the parsed URL is what the dispatcher is
// given. Kept beside the gate's agent cache, keyed by the URL itself and bounded like it, so an
// agent's calls share one parse and a changed URL is simply a new entry.
import { LRUCache } from 'lru-cache';

export type UpstreamTarget = { url: URL; origin: string };

const targets = new LRUCache<string, UpstreamTarget>({ max: 10_000 });

/** The parsed upstream URL and its origin (throws as `new URL` does on a malformed one). */
export function upstreamTarget(url: string): UpstreamTarget {
  let target = targets.get(url);
  if (!target) {
    const parsed = new URL(url);
    target = { url: parsed, origin: parsed.origin };
    targets.set(url, target);
  }
  return target;
}
