// What the claims ask the chain of the batch-settlement channel contract: a channel's escrow, its
// claimed total and its payer's pending timed withdrawal (`channels`, `pendingWithdrawals`), and
// a receiver's claimed and settled totals (`receivers`). Plain eth_calls to the configured node
// with a deadline; any failure is thrown (the caller retries: nothing is claimed on a guess).
import { Interface } from 'ethers';
import { BATCH_SETTLEMENT_ABI, BATCH_SETTLEMENT_ADDRESS } from '../../../contracts/batch-settlement.ts';
import { rpcEthCall } from '../../../x402/erc1271.ts';

const channels = new Interface(BATCH_SETTLEMENT_ABI);

export type ChainRpc = { rpcUrl: string; timeoutMs: number };

/** A channel as the contract holds it; withdrawRequestedAt is 0 when no withdrawal is pending. */
export type ChannelOnChain = { balance: bigint; totalClaimed: bigint; withdrawRequestedAt: number };

function reader(rpc: ChainRpc) {
  const call = rpcEthCall(rpc.rpcUrl, rpc.timeoutMs);
  return async (fn: string, args: unknown[]) => {
    const data = await call({ to: BATCH_SETTLEMENT_ADDRESS, data: channels.encodeFunctionData(fn, args) });
    return channels.decodeFunctionResult(fn, data);
  };
}

async function channelOnChain(rpc: ChainRpc, channelId: string): Promise<ChannelOnChain> {
  const read = reader(rpc);
  const [[balance, totalClaimed], [, initiatedAt]] = await Promise.all([
    read('channels', [channelId]),
    read('pendingWithdrawals', [channelId]),
  ]);
  return {
    balance: balance as bigint,
    totalClaimed: totalClaimed as bigint,
    withdrawRequestedAt: Number(initiatedAt as bigint),
  };
}

/** Several channels, at most `concurrency` reads at once. */
export async function channelsOnChain(
  rpc: ChainRpc,
  channelIds: readonly string[],
  concurrency = 16,
): Promise<Map<string, ChannelOnChain>> {
  const out = new Map<string, ChannelOnChain>();
  let next = 0;
  async function lane() {
    while (next < channelIds.length) {
      const id = channelIds[next++]!;
      out.set(id, await channelOnChain(rpc, id));
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, channelIds.length) }, lane));
  return out;
}

/** What claims credited (receiver, token), and how much of it was sent to the receiver. */
export async function receiverOnChain(
  rpc: ChainRpc,
  receiver: string,
  token: string,
): Promise<{ totalClaimed: bigint; totalSettled: bigint }> {
  const [totalClaimed, totalSettled] = await reader(rpc)('receivers', [receiver, token]);
  return { totalClaimed: totalClaimed as bigint, totalSettled: totalSettled as bigint };
}
