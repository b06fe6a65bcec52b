// The x402 `batch-settlement` channel contract and its ERC-3009 deposit collector: their canonical
// addresses and the ABI the x402 EVM reference client and facilitator call (@x402/evm
// `batchSettlementABI`, plus the reference contract's public constants, events and errors). The
// local chain runs our own implementations of that interface there
// (contracts/X402BatchSettlement.sol, contracts/ERC3009DepositCollector.sol).
import { AbiCoder, Contract, type ContractRunner } from 'ethers';

/** The channel contract, the same address on every EVM chain the x402 contracts are deployed on. */
export const BATCH_SETTLEMENT_ADDRESS = '0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003';
/** The collector that pulls a deposit with the payer's EIP-3009 receiveWithAuthorization. */
export const ERC3009_DEPOSIT_COLLECTOR_ADDRESS = '0x4020806089470a89826cB9fB1f4059150b550004';
/** Multicall3 (the same address on nearly every EVM chain): the reference facilitator reads channels through its tryAggregate. */
export const MULTICALL3_ADDRESS = '0xcA11bde05977b3631167028862bE2a173976CA11';

const CONFIG =
  '(address payer, address payerAuthorizer, address receiver, address receiverAuthorizer, address token, uint40 withdrawDelay, bytes32 salt)';
const VOUCHER_CLAIM = `((${CONFIG} channel, uint128 maxClaimableAmount) voucher, bytes signature, uint128 totalClaimed)`;

/** In ethers' human-readable form; the test checks each entry against the compiled ABI. */
export const BATCH_SETTLEMENT_ABI = [
  'function multicall(bytes[] data) returns (bytes[] results)',
  `function deposit(${CONFIG} config, uint128 amount, address collector, bytes collectorData)`,
  `function claim(${VOUCHER_CLAIM}[] voucherClaims)`,
  `function claimWithSignature(${VOUCHER_CLAIM}[] voucherClaims, bytes authorizerSignature)`,
  'function settle(address receiver, address token)',
  `function initiateWithdraw(${CONFIG} config, uint128 amount)`,
  `function finalizeWithdraw(${CONFIG} config)`,
  `function refund(${CONFIG} config, uint128 amount)`,
  `function refundWithSignature(${CONFIG} config, uint128 amount, uint256 nonce, bytes receiverAuthorizerSignature)`,
  `function getChannelId(${CONFIG} config) view returns (bytes32)`,
  'function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) view returns (bytes32)',
  'function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) view returns (bytes32)',
  `function getClaimBatchDigest(${VOUCHER_CLAIM}[] voucherClaims) view returns (bytes32)`,
  'function channels(bytes32 channelId) view returns (uint128 balance, uint128 totalClaimed)',
  'function pendingWithdrawals(bytes32 channelId) view returns (uint128 amount, uint40 initiatedAt)',
  'function receivers(address receiver, address token) view returns (uint128 totalClaimed, uint128 totalSettled)',
  'function refundNonce(bytes32 channelId) view returns (uint256)',
  'function CHANNEL_CONFIG_TYPEHASH() view returns (bytes32)',
  'function VOUCHER_TYPEHASH() view returns (bytes32)',
  'function REFUND_TYPEHASH() view returns (bytes32)',
  'function CLAIM_ENTRY_TYPEHASH() view returns (bytes32)',
  'function CLAIM_BATCH_TYPEHASH() view returns (bytes32)',
  'function MIN_WITHDRAW_DELAY() view returns (uint40)',
  'function MAX_WITHDRAW_DELAY() view returns (uint40)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  `event ChannelCreated(bytes32 indexed channelId, ${CONFIG} config)`,
  `event ChannelClosed(bytes32 indexed channelId, ${CONFIG} config)`,
  'event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance)',
  'event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed)',
  'event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount)',
  'event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount)',
  'event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter)',
  'event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount)',
  'error InvalidChannel()',
  'error ZeroDeposit()',
  'error DepositOverflow()',
  'error InvalidSignature()',
  'error NotReceiverAuthorizer()',
  'error NotAuthorizedToClaim()',
  'error NotAuthorizedToRefund()',
  'error ClaimExceedsCeiling()',
  'error ClaimExceedsBalance()',
  'error WithdrawalAlreadyPending()',
  'error WithdrawalNotPending()',
  'error NotAuthorizedToFinalizeWithdraw()',
  'error WithdrawDelayNotElapsed()',
  'error NothingToWithdraw()',
  'error WithdrawAmountExceedsAvailable()',
  'error WithdrawDelayOutOfRange()',
  'error EmptyBatch()',
  'error DepositCollectionFailed()',
  'error InvalidCollector()',
  'error InvalidRefundNonce()',
  'error ZeroRefund()',
  'error ReentrancyGuardReentrantCall()',
];

export const ERC3009_DEPOSIT_COLLECTOR_ABI = [
  'function x402BatchSettlement() view returns (address)',
  'function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes collectorData)',
  'error OnlyX402BatchSettlement()',
];

export function batchSettlementContract(runner: ContractRunner | null): Contract {
  return new Contract(BATCH_SETTLEMENT_ADDRESS, BATCH_SETTLEMENT_ABI, runner);
}

/** What `deposit` forwards to the ERC-3009 collector: the authorization's window, salt and signature. */
export function erc3009CollectorData(a: {
  validAfter: bigint;
  validBefore: bigint;
  salt: bigint;
  signature: string;
}): string {
  return AbiCoder.defaultAbiCoder().encode(
    ['uint256', 'uint256', 'uint256', 'bytes'],
    [a.validAfter, a.validBefore, a.salt, a.signature],
  );
}
