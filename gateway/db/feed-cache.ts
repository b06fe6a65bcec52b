// A bounded, TTL-capped read-through cache kept honest by the change feed (change-feed.ts):
// it answers from memory only while the feed is live, drops what a notification names, and
// never stores a read that a notification of a key it holds (or a loss of the feed) overtook. The TTL is a
// safety net for what no notification can report, not the invalidation mechanism. A change
// made through the API is applied here before its writer answers (feed.publish); callers that
// need any change committed before their call to be seen, SQL too, await `feed.sync()` first.
import { LRUCache } from 'lru-cache';
import type { ChangeFeed } from './change-feed.ts';

export type FeedCache<V> = {
  /** The cached value, or `load()`'s (stored when `cacheable` says so and nothing raced it). */
  get(key: string, load: () => Promise<V>): Promise<V>;
  readonly size: number;
};

export function createFeedCache<V>(
  feed: ChangeFeed,
  opts: {
    /** The cache key a feed key names, or null when it names nothing held here. */
    keyOf: (feedKey: string) => string | null;
    cacheable?: (value: V) => boolean;
    max?: number;
    ttlMs?: number;
  },
): FeedCache<V> {
  // Least recently used out past `max` (10,000 by default: a replica's active agents or
  // policies); an entry older than `ttlMs` is never answered from.
  const entries = new LRUCache<string, { value: V }>({ max: opts.max ?? 10_000, ttl: opts.ttlMs ?? 60_000 });

  // This cache's own generation: moved by a loss and by a key it holds, not by the feed's other
  // keys (a session, a stream, another cache's), which any tenant can make arrive all the time
  // and which would otherwise keep every read from being stored.
  let generation = 0;
  feed.subscribe((feedKey) => {
    if (feedKey === '*') {
      generation += 1;
      return entries.clear();
    }
    const key = opts.keyOf(feedKey);
    if (key === null) return;
    generation += 1;
    entries.delete(key);
  });

  return {
    async get(key, load) {
      const live = feed.live();
      if (live) {
        const hit = entries.get(key);
        if (hit) return hit.value;
      }
      const before = generation;
      const value = await load();
      if (live && feed.live() && generation === before && (opts.cacheable?.(value) ?? true)) {
        entries.set(key, { value });
      }
      return value;
    },
    get size() {
      return entries.size;
    },
  };
}
