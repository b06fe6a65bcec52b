// What the gateway reads of a payment channel on chain (the x402BatchSettlement contract): its
// escrow and claimed total, a pending timed withdrawal and the refund nonce, as the spec's
// `channelState` names them. Plain eth_calls to the configured node with a deadline; any failure
// is thrown, and the admission fails closed.
import { Interface } from 'ethers';
import { BATCH_SETTLEMENT_ABI, BATCH_SETTLEMENT_ADDRESS } from '../../../../contracts/batch-settlement.ts';
import { rpcEthCall } from '../../../../x402/erc1271.ts';

const channels = new Interface(BATCH_SETTLEMENT_ABI);

/** A channel's on-chain state. */
export type OnChainChannel = {
  balance: bigint;
  totalClaimed: bigint;
  /** Unix seconds; 0 when no timed withdrawal is pending. */
  withdrawRequestedAt: number;
  refundNonce: bigint;
};

export async function readChannel(
  rpc: { rpcUrl: string; timeoutMs: number },
  channelId: string,
): Promise<OnChainChannel> {
  const call = rpcEthCall(rpc.rpcUrl, rpc.timeoutMs);
  const read = async (fn: string) => {
    const data = await call({ to: BATCH_SETTLEMENT_ADDRESS, data: channels.encodeFunctionData(fn, [channelId]) });
    return channels.decodeFunctionResult(fn, data);
  };
  const [[balance, totalClaimed], [, initiatedAt], [refundNonce]] = await Promise.all([
    read('channels'),
    read('pendingWithdrawals'),
    read('refundNonce'),
  ]);
  return {
    balance: balance as bigint,
    totalClaimed: totalClaimed as bigint,
    withdrawRequestedAt: Number(initiatedAt),
    refundNonce: refundNonce as bigint,
  };
}
