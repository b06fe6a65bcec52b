// A streaming call's bodies hashed as they pass, for its receipt: nothing is held, each chunk is
// hashed on its way through (the hashing itself is the domain's, gateway/receipts/digest.ts).
import { Transform, type Readable } from 'node:stream';
import { bodyHasher, sha256Hex, type BodyDigest } from '../../gateway/receipts/digest.ts';

export type { BodyDigest };

/**
 * The caller's body and its digest, whichever form it comes in: bytes that arrived whole are
 * hashed at once; a stream is hashed as the upstream client pulls it. The source is piped in
 * only once the result is first read (the client's retry rule counts on a stream nobody has
 * started), with the pipe's backpressure; the source itself is never destroyed.
 */
export function digestingBody<B extends Buffer | Readable>(source: B): { body: B | Readable; digest: BodyDigest } {
  if (Buffer.isBuffer(source)) {
    const hex = sha256Hex(source);
    return { body: source, digest: { value: () => hex } };
  }
  const readable = source as Readable;
  const hasher = bodyHasher();
  const body = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hasher.update(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      hasher.finish(true);
      callback();
    },
  });
  const read = body._read.bind(body);
  let piped = false;
  body._read = (size: number) => {
    if (!piped) {
      piped = true;
      readable.once('error', (err) => body.destroy(err));
      readable.once('close', () => {
        if (!readable.readableEnded)
          body.destroy(Object.assign(new Error('request body ended early'), { code: 'ECONNRESET' }));
      });
      readable.pipe(body);
    }
    read(size);
  };
  return { body, digest: hasher };
}

/** Hashes what a readable emits, beside whoever consumes it (it adds a listener, nothing more). */
export function digestOfEmitted(source: Readable): BodyDigest & { finish(complete: boolean): void } {
  const hasher = bodyHasher();
  source.on('data', (chunk: Buffer) => hasher.update(chunk));
  return hasher;
}
