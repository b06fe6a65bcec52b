// What an x402 `upto` payer signs, as EIP-712 typed data: Permit2's PermitWitnessTransferFrom
// with the upto proxy as spender and the witness (to, facilitator, validAfter); and, for the
// eip2612GasSponsoring extension, the token's EIP-2612 Permit approving Permit2. Pure functions.
// Facts from the published interfaces: Permit2's domain has a name and no version; the witness
// type and the proxy's WITNESS_TYPE_STRING are those of @x402/evm's `upto` client and the x402
// upto proxy; the addresses are canonical (the same on every chain).
import { Signature, TypedDataEncoder, getAddress, id, recoverAddress, type TypedDataDomain } from 'ethers';
import type { TokenDomain } from '../../token.ts';

/** Uniswap Permit2 (its signature transfer verifies the payer's signature). */
export const PERMIT2_ADDRESS = '0x000000000022D473030F116dDEE9F6B43aC78BA3';
/** The x402 upto proxy: the spender of every upto authorization, the contract a facilitator settles through. */
export const UPTO_PROXY_ADDRESS = '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002';

/** The witness type the proxy passes to Permit2 (appended to Permit2's PermitWitnessTransferFrom stub). */
export const UPTO_WITNESS_TYPE_STRING =
  'Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)';
export const UPTO_WITNESS_TYPEHASH = id('Witness(address to,address facilitator,uint256 validAfter)');

/** The primary type PermitWitnessTransferFrom and the two it references, in ethers' form. */
export const UPTO_PERMIT_TYPES = {
  PermitWitnessTransferFrom: [
    { name: 'permitted', type: 'TokenPermissions' },
    { name: 'spender', type: 'address' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
    { name: 'witness', type: 'Witness' },
  ],
  TokenPermissions: [
    { name: 'token', type: 'address' },
    { name: 'amount', type: 'uint256' },
  ],
  Witness: [
    { name: 'to', type: 'address' },
    { name: 'facilitator', type: 'address' },
    { name: 'validAfter', type: 'uint256' },
  ],
};

/** EIP-2612's Permit, signed under the token's own domain. */
const EIP2612_PERMIT_TYPES = {
  Permit: [
    { name: 'owner', type: 'address' },
    { name: 'spender', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
  ],
};

/** The signed fields of an upto authorization, as numbers and checksummed addresses. */
export type UptoPermit = {
  token: string;
  amount: bigint;
  spender: string;
  nonce: bigint;
  deadline: bigint;
  to: string;
  facilitator: string;
  validAfter: bigint;
};

/** Permit2's EIP-712 domain on `chainId`: name "Permit2", no version. */
export function permit2Domain(chainId: number): TypedDataDomain {
  return { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS };
}

function permitMessage(p: UptoPermit) {
  return {
    permitted: { token: getAddress(p.token), amount: p.amount },
    spender: getAddress(p.spender),
    nonce: p.nonce,
    deadline: p.deadline,
    witness: { to: getAddress(p.to), facilitator: getAddress(p.facilitator), validAfter: p.validAfter },
  };
}

/** The digest the payer signs (and Permit2 checks, an ERC-1271 wallet is asked about). Throws on a bad address. */
export function uptoPermitDigest(chainId: number, permit: UptoPermit): string {
  return TypedDataEncoder.hash(permit2Domain(chainId), UPTO_PERMIT_TYPES, permitMessage(permit));
}

/** The address whose key made `signature` over `digest`, or null when it is no usable 65-byte signature. */
export function recoverDigestSigner(digest: string, signature: string): string | null {
  try {
    return recoverAddress(digest, Signature.from(signature));
  } catch {
    return null;
  }
}

export type Eip2612Permit = { owner: string; spender: string; value: bigint; nonce: bigint; deadline: bigint };

/** The digest of an EIP-2612 Permit under the token's domain (for USDC: "USD Coin", "2"). */
export function eip2612PermitDigest(domain: TokenDomain, permit: Eip2612Permit): string {
  return TypedDataEncoder.hash(
    { ...domain, verifyingContract: getAddress(domain.verifyingContract) },
    EIP2612_PERMIT_TYPES,
    { ...permit, owner: getAddress(permit.owner), spender: getAddress(permit.spender) },
  );
}
