// The x402 `upto` proxy: the spender a payer's Permit2 signature names and the contract a
// facilitator calls to charge the actual amount. Its canonical address and the ABI the x402 EVM
// reference facilitator calls (@x402/evm `x402UptoPermit2ProxyABI`); the local chain runs our own
// implementation of that interface there (contracts/UptoPermit2Proxy.sol).
import { Contract, type ContractRunner } from 'ethers';

/** The upto proxy's address, the same on every EVM chain the x402 contracts are deployed on. */
export const UPTO_PROXY_ADDRESS = '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002';

const PERMIT = '((address token, uint256 amount) permitted, uint256 nonce, uint256 deadline) permit';
const WITNESS = '(address to, address facilitator, uint256 validAfter) witness';

/** In ethers' human-readable form; the test checks each entry against the compiled ABI. */
export const UPTO_PROXY_ABI = [
  'function PERMIT2() view returns (address)',
  'function WITNESS_TYPEHASH() view returns (bytes32)',
  'function WITNESS_TYPE_STRING() view returns (string)',
  `function settle(${PERMIT}, uint256 amount, address owner, ${WITNESS}, bytes signature)`,
  `function settleWithPermit((uint256 value, uint256 deadline, bytes32 r, bytes32 s, uint8 v) permit2612, ${PERMIT}, uint256 amount, address owner, ${WITNESS}, bytes signature)`,
  'event Settled()',
  'event SettledWithPermit()',
  'event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason)',
  'event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode)',
  'event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data)',
  'error AmountExceedsPermitted()',
  'error UnauthorizedFacilitator()',
  'error InvalidAmount()',
  'error InvalidOwner()',
  'error InvalidDestination()',
  'error PaymentTooEarly()',
  'error Permit2612AmountMismatch()',
  'error ReentrancyGuardReentrantCall()',
];

export function uptoProxyContract(runner: ContractRunner | null): Contract {
  return new Contract(UPTO_PROXY_ADDRESS, UPTO_PROXY_ABI, runner);
}
