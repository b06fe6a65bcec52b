// The rate-limit stage: a token from every bucket a request is counted in (all or nothing; 429
// with Retry-After when one is empty), and the give-back of a call refused for what it sent
// (refund.ts). The buckets are the domain's (gateway/ratelimit/); which ones a call takes is its
// door's (token-door.ts, public-door.ts). The public routes' pages and polls take them too.
import { ApiError } from '../../errors.ts';
import type { Bucket, Decision, RateLimiter } from '../../../gateway/ratelimit/index.ts';

/** Takes a token from every bucket; returns the give-back, at most once effective. */
export async function takeTokens(limiter: RateLimiter, buckets: Bucket[]): Promise<() => Promise<void>> {
  return tokensTaken(limiter, buckets, await limiter.take(buckets));
}

/** The 429 of a refused take, else the give-back of the tokens it took (a take made elsewhere: token-door.ts). */
export function tokensTaken(limiter: RateLimiter, buckets: Bucket[], decision: Decision): () => Promise<void> {
  if (!decision.allowed)
    throw new ApiError(429, 'rate limit exceeded', { 'Retry-After': String(decision.retryAfterSeconds) });
  let given = false;
  return async () => {
    if (given) return;
    given = true;
    await limiter.giveBack(buckets);
  };
}
