// The facilitator's view of the chain for `batch-settlement`: the channel contract's state it
// reads (a channel's escrow, claims, pending withdrawal and refund nonce; a receiver's claimed and
// settled totals), the calls the gas wallet sends it (deposit through the ERC-3009 collector,
// claimWithSignature, settle, refundWithSignature, a claim and a refund together in its
// multicall), their simulation with the revert decoded from the contract's and the token's
// errors, and what a mined call moved (its Settled or Refunded log). As in chain.ts, a revert is
// a business answer and anything else from the RPC is thrown, for the step to retry.
import { Interface, type JsonRpcProvider } from 'ethers';
import {
  BATCH_SETTLEMENT_ABI,
  BATCH_SETTLEMENT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  erc3009CollectorData,
} from '../contracts/batch-settlement.ts';
import { TOKEN_ABI } from '../contracts/token.ts';
import type { ChannelConfig, DepositPayload } from '../x402/schemes/batch-settlement/schemas.ts';
import type { ClaimRow } from '../x402/schemes/batch-settlement/settle-request.ts';
import { revertCause, revertErrorName, rpcNow, simulate } from './chain.ts';

const channelsInterface = new Interface(BATCH_SETTLEMENT_ABI);
/** Every error a call can revert with: the channel contract's and the token's. */
const errorsInterface = new Interface(
  [...BATCH_SETTLEMENT_ABI, ...TOKEN_ABI].filter((entry) => entry.startsWith('error ')),
);

async function read(provider: JsonRpcProvider, fn: string, args: unknown[]) {
  const data = channelsInterface.encodeFunctionData(fn, args);
  const answer = await rpcNow<string>(provider, 'eth_call', [{ to: BATCH_SETTLEMENT_ADDRESS, data }, 'latest']);
  return channelsInterface.decodeFunctionResult(fn, answer);
}

/** A channel as the spec's `channelState` names it. */
export type ChannelSnapshot = {
  channelId: string;
  balance: bigint;
  totalClaimed: bigint;
  withdrawRequestedAt: number;
  refundNonce: bigint;
};

export async function channelSnapshot(provider: JsonRpcProvider, channelId: string): Promise<ChannelSnapshot> {
  const [[balance, totalClaimed], [, initiatedAt], [refundNonce]] = await Promise.all([
    read(provider, 'channels', [channelId]),
    read(provider, 'pendingWithdrawals', [channelId]),
    read(provider, 'refundNonce', [channelId]),
  ]);
  return {
    channelId,
    balance: balance as bigint,
    totalClaimed: totalClaimed as bigint,
    withdrawRequestedAt: Number(initiatedAt),
    refundNonce: refundNonce as bigint,
  };
}

/** The spec's `channelState`, amounts as decimal strings. */
export function channelStateExtra(s: ChannelSnapshot) {
  return {
    channelId: s.channelId,
    balance: s.balance.toString(),
    totalClaimed: s.totalClaimed.toString(),
    withdrawRequestedAt: s.withdrawRequestedAt,
    refundNonce: s.refundNonce.toString(),
  };
}

/** What claims credited (receiver, token) in total, and how much of it was sent to the receiver. */
export async function receiverTotals(
  provider: JsonRpcProvider,
  receiver: string,
  token: string,
): Promise<{ totalClaimed: bigint; totalSettled: bigint }> {
  const [totalClaimed, totalSettled] = await read(provider, 'receivers', [receiver, token]);
  return { totalClaimed: totalClaimed as bigint, totalSettled: totalSettled as bigint };
}

/** deposit's arguments for the ERC-3009 collector path: (config, amount, collector, collectorData). */
export function erc3009DepositArgs(payload: DepositPayload): [ChannelConfig, bigint, string, string] {
  const auth = payload.deposit.authorization;
  if (!('erc3009Authorization' in auth)) throw new Error('only the ERC-3009 collector path is taken');
  const a = auth.erc3009Authorization;
  const collectorData = erc3009CollectorData({
    validAfter: BigInt(a.validAfter),
    validBefore: BigInt(a.validBefore),
    salt: BigInt(a.salt),
    signature: a.signature,
  });
  return [payload.channelConfig, BigInt(payload.deposit.amount), ERC3009_DEPOSIT_COLLECTOR_ADDRESS, collectorData];
}

export function depositCalldata(payload: DepositPayload): string {
  return channelsInterface.encodeFunctionData('deposit', erc3009DepositArgs(payload));
}

export function claimCalldata(rows: readonly ClaimRow[], authorizerSignature: string): string {
  const claims = rows.map((row) => ({
    voucher: { channel: row.voucher.channel, maxClaimableAmount: BigInt(row.voucher.maxClaimableAmount) },
    signature: row.signature,
    totalClaimed: BigInt(row.totalClaimed),
  }));
  return channelsInterface.encodeFunctionData('claimWithSignature', [claims, authorizerSignature]);
}

export function settleCalldata(receiver: string, token: string): string {
  return channelsInterface.encodeFunctionData('settle', [receiver, token]);
}

export function refundCalldata(config: ChannelConfig, amount: bigint, nonce: bigint, signature: string): string {
  return channelsInterface.encodeFunctionData('refundWithSignature', [config, amount, nonce, signature]);
}

/** Several of the contract's calls in one transaction, in order, all or none. */
export function multicallCalldata(calls: string[]): string {
  return channelsInterface.encodeFunctionData('multicall', [calls]);
}

/** Why a call would not go through, from the contract's errors, else the token's (for operators only). */
function batchRevertCause(data: string | null | undefined): string {
  const name = revertErrorName(errorsInterface, data);
  if (name === 'InvalidSignature') return 'invalid_signature';
  if (name === 'InvalidRefundNonce') return 'refund_nonce_used';
  return revertCause(name);
}

/** eth_call of the call the gas wallet would send to the channel contract: null when it would succeed, else the cause. */
export function simulateBatch(provider: JsonRpcProvider, tx: { from: string; data: string }): Promise<string | null> {
  return simulate(provider, { ...tx, to: BATCH_SETTLEMENT_ADDRESS }, batchRevertCause);
}

/** The amount a mined transaction's `Settled` or `Refunded` logs of the channel contract name, summed (0 without one). */
export async function movedBy(
  provider: JsonRpcProvider,
  txHash: string,
  event: 'Settled' | 'Refunded',
): Promise<bigint | null> {
  const receipt = await provider.getTransactionReceipt(txHash);
  if (!receipt) return null;
  const topic = channelsInterface.getEvent(event)!.topicHash;
  let moved = 0n;
  for (const log of receipt.logs) {
    if (log.address.toLowerCase() !== BATCH_SETTLEMENT_ADDRESS.toLowerCase() || log.topics[0] !== topic) continue;
    moved += channelsInterface.parseLog(log)!.args.amount as bigint;
  }
  return moved;
}
