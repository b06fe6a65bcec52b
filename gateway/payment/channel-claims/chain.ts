// What the claims ask the chain of the batch-settlement channel contract: many channels' state
// (as the admission reads one: escrow, claimed total, a payer's pending timed withdrawal, refund
// nonce), and a receiver's claimed and settled totals (`receivers`). Plain eth_calls to the configured node
// with a deadline; any failure is thrown (the caller retries: nothing is claimed on a guess).
import { Interface } from 'ethers';
import { BATCH_SETTLEMENT_ABI, BATCH_SETTLEMENT_ADDRESS } from '../../../contracts/batch-settlement.ts';
import { rpcEthCall } from '../../../x402/erc1271.ts';
import { readChannel, type OnChainChannel } from '../schemes/batch-settlement/chain.ts';

/** A channel as the contract holds it (the admission's read: gateway/payment/schemes/batch-settlement/chain.ts). */
export type ChannelOnChain = OnChainChannel;

const channels = new Interface(BATCH_SETTLEMENT_ABI);

export type ChainRpc = { rpcUrl: string; timeoutMs: number };

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
      out.set(id, await readChannel(rpc, id));
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
  const call = rpcEthCall(rpc.rpcUrl, rpc.timeoutMs);
  const data = await call({
    to: BATCH_SETTLEMENT_ADDRESS,
    data: channels.encodeFunctionData('receivers', [receiver, token]),
  });
  const [totalClaimed, totalSettled] = channels.decodeFunctionResult('receivers', data);
  return { totalClaimed: totalClaimed as bigint, totalSettled: totalSettled as bigint };
}
