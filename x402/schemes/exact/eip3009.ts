// EIP-3009 `transferWithAuthorization` as an x402 `exact` payment signs it: the EIP-712
// domain of the token and the typed struct. Pure functions, no chain access.
import { TypedDataEncoder, getAddress, verifyTypedData, type TypedDataDomain } from 'ethers';
import { LRUCache } from 'lru-cache';
import type { TokenDomain } from '../../token.ts';
import type { TransferAuthorization } from './schemas.ts';

export const TRANSFER_WITH_AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
};

function typedDomain(domain: TokenDomain): TypedDataDomain {
  return {
    name: domain.name,
    version: domain.version,
    chainId: domain.chainId,
    verifyingContract: getAddress(domain.verifyingContract),
  };
}

// Recovery is a pure function of its inputs and costs milliseconds of curve arithmetic; the
// facilitator's handler and its (embedded) worker check the same authorization moments apart.
// The signer, or '' for a signature that recovers nothing.
const recovered = new LRUCache<string, string>({ max: 2_000 });

/** The address that signed `authorization` for `domain`, or null when the signature is unusable. */
export function recoverAuthorizer(
  domain: TokenDomain,
  authorization: TransferAuthorization,
  signature: string,
): string | null {
  const memoKey = JSON.stringify([
    domain.name,
    domain.version,
    domain.chainId,
    domain.verifyingContract.toLowerCase(),
    authorization,
    signature,
  ]);
  const hit = recovered.get(memoKey);
  if (hit !== undefined) return hit || null;
  let signer: string | null;
  try {
    signer = getAddress(
      verifyTypedData(typedDomain(domain), TRANSFER_WITH_AUTHORIZATION_TYPES, authorization, signature),
    );
  } catch {
    signer = null;
  }
  recovered.set(memoKey, signer ?? '');
  return signer;
}

/** The EIP-712 digest the payer signed: what a contract wallet's `isValidSignature` is asked about. */
export function authorizationDigest(domain: TokenDomain, authorization: TransferAuthorization): string {
  return TypedDataEncoder.hash(typedDomain(domain), TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
}
