// A call refused for what it sent reaches no upstream, and when the refusal cost the gateway
// next to nothing it costs its tenant's buckets nothing either: its rate-limit tokens come back
// before the refusal goes out, so a flood of such calls drains no one's budget. Used by the
// body stage (413) and the parse stage (400).
import { ApiError } from '../errors.ts';
import type { Admitted } from './door.ts';

/**
 * Runs a check of what the caller sent; a call it refuses with `status` gives its tokens back,
 * but only when `cheap()` says the refusal was cheap (a declared length over the cap, refused
 * before a byte is read; a small body's parse). Reading 32 MiB or parsing a large body is work
 * every tenant's calls wait behind: those refusals keep their tokens.
 */
export async function refundIfRefused<T>(
  admitted: Pick<Admitted, 'giveBack'>,
  status: 400 | 413,
  check: () => T | Promise<T>,
  cheap: () => boolean,
): Promise<T> {
  try {
    return await check();
  } catch (err) {
    if (err instanceof ApiError && err.status === status && cheap()) await admitted.giveBack();
    throw err;
  }
}

/** A parse refusal of a body this small costs less than the token it gives back. */
const CHEAP_PARSE_BYTES = 64 * 1024;

export function cheapToParse(body: Buffer): boolean {
  return body.length <= CHEAP_PARSE_BYTES;
}
