// Resource ids are a type prefix plus a UUIDv7 (docs/API.md "Conventions"): time-ordered, so
// primary-key indexes stay append-mostly and ids sort by creation.
import { getRandomValues } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';

export type IdPrefix = 'agt' | 'cred' | 'inv' | 'pdec' | 'body' | 'mcps' | 'bud' | 'pay';

// uuid's own v7 asks the OS for 16 fresh bytes per id (getRandomValues, which OpenSSL pays for
// with a fork check, a syscall, each time), and an id is minted on every proxied call. Here the
// bytes come from a pool refilled 4 KiB at a time, each 16 used once; the timestamp and the
// counter that keeps ids of one millisecond in order are kept as uuid keeps them (RFC 9562
// §6.2, method 1).
const pool = new Uint8Array(4096);
let poolAt = pool.length;
let lastMs = -Infinity;
let sequence = 0;

function random16(): Uint8Array {
  if (poolAt + 16 > pool.length) {
    getRandomValues(pool);
    poolAt = 0;
  }
  return pool.subarray(poolAt, (poolAt += 16));
}

/** A UUIDv7 string, monotonic within this process. */
function uuidV7(): string {
  const random = random16();
  const now = Date.now();
  if (now > lastMs) {
    lastMs = now;
    sequence = ((random[6] & 0x7f) << 24) | (random[7] << 16) | (random[8] << 8) | random[9];
  } else {
    sequence = (sequence + 1) | 0;
    if (sequence === 0) lastMs++;
  }
  return uuidv7({ random, msecs: lastMs, seq: sequence });
}

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${uuidV7()}`;
}

const ID_SHAPE = /^[a-z]+_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** True when `value` is a well-formed id of the given prefix; anything else is treated as absent (404). */
export function isId(prefix: IdPrefix, value: string): boolean {
  return value.startsWith(`${prefix}_`) && ID_SHAPE.test(value);
}

/** When a well-formed id was minted (its UUIDv7 timestamp, ms since the epoch). */
export function mintedAt(id: string): number {
  const hex = id.slice(id.indexOf('_') + 1).replaceAll('-', '');
  return parseInt(hex.slice(0, 12), 16);
}
