// The token the gateway and the facilitator pay in: its chain id and the functions they call,
// the same on the local chain's stand-in (contracts/UsdcToken.sol) and on USDC on Base.
import { Contract, type ContractRunner } from 'ethers';

/** Base mainnet's chain id: signed authorizations carry it, so local ones look like production ones. */
export const CHAIN_ID = 8453;

/**
 * The token functions the gateway and facilitator use, in ethers' human-readable form. Everything
 * except `mint` and the custom errors also exists on real USDC (FiatToken v2.2) on Base. The test
 * checks each entry against the compiled ABI so the two cannot drift apart.
 */
export const TOKEN_ABI = [
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function version() view returns (string)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function balanceOf(address account) view returns (uint256)',
  'function totalSupply() view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function allowance(address owner, address spender) view returns (uint256)',
  'function nonces(address owner) view returns (uint256)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, bytes signature)',
  'function mint(address to, uint256 value)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function cancelAuthorization(address authorizer, bytes32 nonce, bytes signature)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event Approval(address indexed owner, address indexed spender, uint256 value)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
  // Listed so `contract.interface.parseError(error.data)` names a revert instead of leaving raw data.
  'error ERC3009InvalidSignature()',
  'error ERC3009InvalidAuthorizationTime(uint256 validAfter, uint256 validBefore)',
  'error ERC3009UsedAuthorization(address authorizer, bytes32 nonce)',
  'error ERC2612ExpiredSignature(uint256 deadline)',
  'error ERC2612InvalidSignature(address owner)',
  'error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)',
  'error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed)',
  'error ERC20InvalidReceiver(address receiver)',
  'error OwnableUnauthorizedAccount(address account)',
  'error ECDSAInvalidSignature()',
  'error ECDSAInvalidSignatureS(bytes32 s)',
];

export function tokenContract(address: string, runner: ContractRunner | null): Contract {
  return new Contract(address, TOKEN_ABI, runner);
}
