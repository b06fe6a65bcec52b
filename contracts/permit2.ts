// Permit2's signature transfer, through which the x402 `upto` scheme moves the payer's tokens:
// its canonical address and the functions the project calls. The local chain runs our own
// implementation of the published interface there (contracts/Permit2.sol); on Base it is Uniswap's.
import { Contract, type ContractRunner } from 'ethers';

/** Permit2's address, the same on every EVM chain (deployed through a deterministic CREATE2). */
export const PERMIT2_ADDRESS = '0x000000000022D473030F116dDEE9F6B43aC78BA3';

/**
 * The functions, events and errors of Permit2's ISignatureTransfer the project uses, in ethers'
 * human-readable form; the test checks each against the compiled ABI.
 */
export const PERMIT2_ABI = [
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function nonceBitmap(address owner, uint256 wordPosition) view returns (uint256)',
  'function invalidateUnorderedNonces(uint256 wordPos, uint256 mask)',
  'function permitTransferFrom(((address token, uint256 amount) permitted, uint256 nonce, uint256 deadline) permit, (address to, uint256 requestedAmount) transferDetails, address owner, bytes signature)',
  'function permitWitnessTransferFrom(((address token, uint256 amount) permitted, uint256 nonce, uint256 deadline) permit, (address to, uint256 requestedAmount) transferDetails, address owner, bytes32 witness, string witnessTypeString, bytes signature)',
  'event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask)',
  'error SignatureExpired(uint256 signatureDeadline)',
  'error InvalidAmount(uint256 maxAmount)',
  'error InvalidNonce()',
  'error InvalidSignatureLength()',
  'error InvalidSignature()',
  'error InvalidSigner()',
  'error InvalidContractSignature()',
];

export function permit2Contract(runner: ContractRunner | null): Contract {
  return new Contract(PERMIT2_ADDRESS, PERMIT2_ABI, runner);
}

/** Whether Permit2 nonce `nonce` of `owner` is used, given its word (`nonceBitmap(owner, nonce >> 8)`). */
export function nonceUsed(word: bigint, nonce: bigint): boolean {
  return ((word >> (nonce & 0xffn)) & 1n) === 1n;
}
