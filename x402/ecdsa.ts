// Who signed a digest, as OpenZeppelin's ECDSA.recover (and so a contract that checks a signature
// with it) sees it: 65 bytes r‖s‖v, v 27 or 28, s in the lower half of the order (the malleable
// twin refused), r and s nonzero and below the order, r the x of a curve point. The public key
// is recovered by libsecp256k1: natively (the `secp256k1` package's prebuilt addon, ~0.08 ms of
// CPU) where its build loads, else compiled to WebAssembly (tiny-secp256k1, ~0.4 ms, and more
// when other processes have cooled the caches between calls); ethers' pure-JS recovery cost
// ~3 ms. Every voucher-paid call runs one.
import { createRequire } from 'node:module';
import { LRUCache } from 'lru-cache';
import { recover as wasmRecover } from 'tiny-secp256k1';
import { getAddress, getBytes, keccak256 } from 'ethers';
import type * as Secp256k1 from 'secp256k1';

// secp256k1's order halved: OpenZeppelin's ECDSA refuses an s above it.
const HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n;

/**
 * The uncompressed public key (65 bytes) whose signature r‖s (64 bytes) over `digest` has this
 * recovery id (0 or 1: r taken as the x of R, as ecrecover does); throws, or answers null, for
 * none (r or s zero or not below the order, r no point's x).
 */
export type Recovery = (digest: Uint8Array, rs: Uint8Array, recoveryId: 0 | 1) => Uint8Array | null;

const inWasm: Recovery = (digest, rs, recoveryId) => wasmRecover(digest, rs, recoveryId, false);

/** libsecp256k1's own build, when this platform has one (linux-x64 glibc, darwin-arm64, win32-x64); else null. */
function nativeRecovery(): Recovery | null {
  try {
    // Its bindings only: the package's own fallback is a pure-JS curve, slower than the WebAssembly one.
    const native = createRequire(import.meta.url)('secp256k1/bindings.js') as typeof Secp256k1;
    return (digest, rs, recoveryId) => native.ecdsaRecover(rs, recoveryId, digest, false);
  } catch {
    return null;
  }
}

/** Each way of recovering this process has: the native one first where it loads (tests run each). */
export const recoveries: Readonly<Record<'native' | 'wasm', Recovery | null>> = {
  native: nativeRecovery(),
  wasm: inWasm,
};
const recovery: Recovery = recoveries.native ?? inWasm;

// The addresses of the keys seen lately: a payer signs every voucher with the same key, and its
// address (two keccaks with the checksum) cost ~0.08 ms a call.
const addresses = new LRUCache<string, string>({ max: 10_000 });

/** The checksummed address whose key made `signature` over the 32-byte `digest`; null for anything ECDSA.recover refuses. */
export function recoverStrict(digest: string, signature: string, recover: Recovery = recovery): string | null {
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature) || !/^0x[0-9a-fA-F]{64}$/.test(digest)) return null;
  const v = parseInt(signature.slice(130, 132), 16);
  const s = BigInt(`0x${signature.slice(66, 130)}`);
  if ((v !== 27 && v !== 28) || s > HALF_ORDER) return null;
  let publicKey: Uint8Array | null;
  try {
    publicKey = recover(getBytes(digest), getBytes(signature).subarray(0, 64), v === 27 ? 0 : 1);
  } catch {
    return null;
  }
  if (!publicKey) return null;
  const key = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('hex');
  let address = addresses.get(key);
  if (address === undefined) {
    // The last 20 bytes of the keccak of the uncompressed key without its 0x04 prefix.
    address = getAddress(`0x${keccak256(publicKey.subarray(1)).slice(-40)}`);
    addresses.set(key, address);
  }
  return address;
}
