// An address in its EIP-55 checksummed form, kept for the addresses seen lately: the checksum
// costs a keccak, and every paid call's challenge entries and voucher check name the same few
// addresses (the payee, the receiver authorizer, the payer) again.
import { getAddress } from 'ethers';
import { LRUCache } from 'lru-cache';

const checksums = new LRUCache<string, string>({ max: 10_000 });

/** `getAddress(address)`, kept: throws on anything that is no address, as it does. */
export function checksummed(address: string): string {
  let sum = checksums.get(address);
  if (sum === undefined) checksums.set(address, (sum = getAddress(address)));
  return sum;
}
