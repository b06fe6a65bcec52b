// Who signed a digest, as OpenZeppelin's ECDSA.recover (and so a contract that checks a signature
// with it) sees it: 65 bytes r‖s‖v, v 27 or 28, s in the lower half of the order (the malleable
// twin refused), r and s nonzero and below the order, r the x of a curve point. The public key
// is recovered by libsecp256k1 (tiny-secp256k1, compiled to WebAssembly): ethers' pure-JS
// recovery cost ~3 ms of CPU per signature, on every voucher-paid call.
import { recover } from 'tiny-secp256k1';
import { getAddress, getBytes, keccak256 } from 'ethers';

// secp256k1's order halved: OpenZeppelin's ECDSA refuses an s above it.
const HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n;

/** The checksummed address whose key made `signature` over the 32-byte `digest`; null for anything ECDSA.recover refuses. */
export function recoverStrict(digest: string, signature: string): string | null {
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature) || !/^0x[0-9a-fA-F]{64}$/.test(digest)) return null;
  const v = parseInt(signature.slice(130, 132), 16);
  const s = BigInt(`0x${signature.slice(66, 130)}`);
  if ((v !== 27 && v !== 28) || s > HALF_ORDER) return null;
  let publicKey: Uint8Array | null;
  try {
    // Recovery ids 0 and 1 only (r taken as the x of R, as ecrecover does); it throws on r or s
    // zero or not below the order, or r no point's x.
    publicKey = recover(getBytes(digest), getBytes(signature).subarray(0, 64), v === 27 ? 0 : 1, false);
  } catch {
    return null;
  }
  if (!publicKey) return null;
  // The address: the last 20 bytes of the keccak of the uncompressed key without its 0x04 prefix.
  return getAddress(`0x${keccak256(publicKey.subarray(1)).slice(-40)}`);
}
