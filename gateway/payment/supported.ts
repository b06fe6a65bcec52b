// What a tenant's facilitator settles, from its /supported: the kinds (scheme, network, asset,
// extra) a challenge entry may need to name (the `upto` entry names the facilitator's address,
// which the payer's authorization must name too). Read through the facilitator client over the
// tenant's mutual TLS, cached per facilitator URL for a few minutes; a failed read is not cached
// and is null, so nothing that needs it can be offered (the caller fails closed).
import { LRUCache } from 'lru-cache';
import { z } from 'zod';

const SupportedKind = z.looseObject({
  x402Version: z.number().int().optional(),
  scheme: z.string(),
  network: z.string(),
  asset: z.string().optional(),
  extra: z.record(z.string(), z.unknown()).optional(),
});
export type SupportedKind = z.infer<typeof SupportedKind>;

/** The /supported answer, as x402 facilitators give it (kinds of other shapes make it unreadable). */
export const SupportedAnswer = z.looseObject({ kinds: z.array(SupportedKind) });

/** How long a facilitator's kinds are trusted: a facilitator's gas wallet changes rarely. */
const SUPPORTED_TTL_MS = 5 * 60_000;
const MAX_FACILITATORS = 100;

/** A facilitator to read, as the facilitator client's target names it. */
type Facilitator = { facilitatorUrl: string };

export type SupportedKinds<T extends Facilitator> = {
  /** The kinds of the target's facilitator, or null when they could not be read. */
  of(target: T): Promise<SupportedKind[] | null>;
};

/** A cache over `read` (the facilitator client's `supported`). */
export function createSupportedKinds<T extends Facilitator>(
  read: (target: T) => Promise<SupportedKind[] | null>,
  ttlMs = SUPPORTED_TTL_MS,
): SupportedKinds<T> {
  const cache = new LRUCache<string, SupportedKind[]>({ max: MAX_FACILITATORS, ttl: ttlMs });
  // Concurrent reads of one facilitator share one request.
  const reading = new Map<string, Promise<SupportedKind[] | null>>();
  return {
    async of(target) {
      const key = target.facilitatorUrl;
      const cached = cache.get(key);
      if (cached) return cached;
      let pending = reading.get(key);
      if (!pending) {
        pending = read(target).then((kinds) => {
          if (kinds) cache.set(key, kinds);
          return kinds;
        });
        reading.set(key, pending);
        void pending.finally(() => reading.delete(key));
      }
      return pending;
    },
  };
}
