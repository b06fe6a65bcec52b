// Step 3, broadcast: the stored bytes are sent, never anything that is not stored first.
import { rpcNow, sendRaw } from '../chain.ts';
import { markBroadcast } from '../store/records.ts';
import { inclusionOf } from './inclusion.ts';
import type { Signed } from './signed.ts';
import type { Inclusion, SettlementDeps } from './types.ts';

// Nodes without eth_sendRawTransactionSync (EIP-7966) get plain sends from then on.
const withoutSyncSend = new WeakSet<object>();
const SYNC_SEND_WAIT_MS = 1_000;

type RpcReceipt = {
  transactionHash: string;
  status: string;
  blockNumber: string;
  gasUsed: string;
  effectiveGasPrice: string;
  from: string;
  to: string | null;
};

/**
 * Sends the stored bytes; with a node that has eth_sendRawTransactionSync (anvil, and chains
 * adopting EIP-7966), the same call waits up to a second for the receipt, which saves the
 * first receipt poll. Returns the inclusion when the node answered with one.
 */
async function send(deps: SettlementDeps, raw: string, hash: string): Promise<Inclusion | null> {
  if (!withoutSyncSend.has(deps.provider)) {
    try {
      const receipt = await rpcNow<RpcReceipt | null>(deps.provider, 'eth_sendRawTransactionSync', [
        raw,
        SYNC_SEND_WAIT_MS,
      ]);
      if (receipt?.transactionHash) {
        return inclusionOf({
          status: Number(receipt.status),
          blockNumber: Number(receipt.blockNumber),
          gasUsed: BigInt(receipt.gasUsed),
          gasPrice: BigInt(receipt.effectiveGasPrice ?? 0),
          hash: receipt.transactionHash,
          from: receipt.from,
          to: receipt.to,
        });
      }
      return null;
    } catch (err) {
      const text = String((err as { error?: { message?: string } }).error?.message ?? (err as Error).message);
      if (/not (found|supported|available)|unknown method|does not exist/i.test(text))
        withoutSyncSend.add(deps.provider);
      // Anything else (a wait that timed out, bytes the node already holds): the plain send
      // below settles whether the node has them, and the poll finds the receipt.
    }
  }
  await sendRaw(deps.provider, raw, hash);
  return null;
}

/** Sends the record's stored bytes and counts the send; the inclusion when the node answered with it at once. */
export async function broadcast(deps: SettlementDeps, record: Signed): Promise<Inclusion | null> {
  // The bytes are already stored (sign), so counting the attempt runs alongside the send.
  const [inclusion] = await Promise.all([
    send(deps, record.rawTx, record.txHash),
    markBroadcast(deps.pool, record.key),
  ]);
  return inclusion;
}
