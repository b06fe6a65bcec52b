// SHA-256 of a streaming call's bodies as they pass, for its receipt: nothing is held, each
// chunk is hashed on its way through.
import { createHash, type Hash } from 'node:crypto';
import { Transform, type Readable } from 'node:stream';

export type BodyDigest = {
  /** The hex digest once the body has passed whole; null while unfinished or when it broke off. */
  value(): string | null;
};

/**
 * The caller's body, hashed as the upstream client pulls it. The source is piped in only
 * once the result is first read (the client's retry rule counts on a stream nobody has
 * started), with the pipe's backpressure; the source itself is never destroyed.
 */
export function digestingBody(source: Readable): { body: Readable; digest: BodyDigest } {
  const hash = createHash('sha256');
  let hex: string | null = null;
  const body = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hash.update(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      hex = hash.digest('hex');
      callback();
    },
  });
  const read = body._read.bind(body);
  let piped = false;
  body._read = (size: number) => {
    if (!piped) {
      piped = true;
      source.once('error', (err) => body.destroy(err));
      source.once('close', () => {
        if (!source.readableEnded)
          body.destroy(Object.assign(new Error('request body ended early'), { code: 'ECONNRESET' }));
      });
      source.pipe(body);
    }
    read(size);
  };
  return { body, digest: { value: () => hex } };
}

/** Hashes what a readable emits, beside whoever consumes it (it adds a listener, nothing more). */
export function digestOfEmitted(source: Readable): { digest: BodyDigest; finish(complete: boolean): void } {
  const hash: Hash = createHash('sha256');
  let hex: string | null = null;
  source.on('data', (chunk: Buffer) => hash.update(chunk));
  return {
    digest: { value: () => hex },
    finish(complete) {
      if (complete && hex === null) hex = hash.digest('hex');
    },
  };
}

export function digestOf(body: Buffer): BodyDigest {
  const hex = createHash('sha256').update(body).digest('hex');
  return { value: () => hex };
}
