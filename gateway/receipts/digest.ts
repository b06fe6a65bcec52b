// The SHA-256 a receipt commits to for a body, computed here for every body the gateway hashes:
// a streaming call's bodies as they pass, the transactional activity's answer as it reads it,
// and a stored body (the request side of a transactional call's receipt).
import { createHash } from 'node:crypto';

export type BodyDigest = {
  /** The hex digest once the body has passed whole; null while unfinished or when it broke off. */
  value(): string | null;
};

/** A body hashed chunk by chunk as it passes (nothing held); its digest exists once it is whole. */
export function bodyHasher(): BodyDigest & { update(chunk: Buffer): void; finish(complete: boolean): void } {
  const hash = createHash('sha256');
  let hex: string | null = null;
  let finished = false;
  return {
    update: (chunk) => void hash.update(chunk),
    /** A body that broke off has no digest: a receipt never commits to bytes nobody received whole. */
    finish(complete) {
      if (finished) return;
      finished = true;
      if (complete) hex = hash.digest('hex');
    },
    value: () => hex,
  };
}

/** The digest of a body held whole. */
export function sha256Hex(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex');
}
