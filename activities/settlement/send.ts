// Steps 4 to 6: broadcast the stored bytes, wait for first-block inclusion, record the
// outcome; and the long watch after an inclusion timeout. Every send is of the bytes stored
// at signing, so a retry, a rebroadcast or a second worker after a crash can only ever put
// that one transaction on chain (same hash, same gas nonce).
import type { TransactionReceipt } from 'ethers';
import { sendRaw } from '../../facilitator/chain.ts';
import { completeSettlement, markBroadcast, type SettlementRecord } from '../../facilitator/store.ts';
import { outcomeOfRecord } from './verify.ts';
import type { Inclusion, SettlementDeps, SettlementOutcome } from './types.ts';

export type Signed = SettlementRecord & { rawTx: string; txHash: string };

const POLL_MS = [0, 10, 25, 50, 100, 200, 400, 800];
const REBROADCAST_EVERY_MS = 3_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function signedOrThrow(record: SettlementRecord | null): Signed {
  if (!record?.rawTx || !record.txHash) throw new Error('no signed transaction stored for this settlement');
  return record as Signed;
}

function inclusionOf(receipt: TransactionReceipt): Inclusion {
  return { mined: true, success: receipt.status === 1, blockNumber: receipt.blockNumber, gasUsed: receipt.gasUsed };
}

export async function broadcast(deps: SettlementDeps, record: Signed): Promise<void> {
  // The bytes are already stored (sign), so counting the attempt runs alongside the send.
  await Promise.all([sendRaw(deps.provider, record.rawTx, record.txHash), markBroadcast(deps.pool, record.key)]);
}

/** Polls for the receipt until `untilMs`, re-sending the same bytes whenever the node seems to have lost them. */
export async function awaitInclusion(deps: SettlementDeps, record: Signed, untilMs: number, beat: () => void = () => undefined): Promise<Inclusion> {
  let lastSend = Date.now();
  for (let i = 0; ; i++) {
    const receipt = await deps.provider.getTransactionReceipt(record.txHash);
    if (receipt) return inclusionOf(receipt);
    if (Date.now() >= untilMs) return { mined: false };
    if (Date.now() - lastSend >= REBROADCAST_EVERY_MS) {
      lastSend = Date.now();
      const known = await deps.provider.getTransaction(record.txHash);
      if (!known) await sendRaw(deps.provider, record.rawTx, record.txHash).catch(() => undefined);
    }
    beat();
    await sleep(Math.min(POLL_MS[Math.min(i + 1, POLL_MS.length - 1)], Math.max(untilMs - Date.now(), 0)));
  }
}

export async function recordInclusion(deps: SettlementDeps, key: string, inclusion: Inclusion): Promise<SettlementOutcome> {
  const record = inclusion.mined
    ? await completeSettlement(
        deps.pool,
        key,
        inclusion.success
          ? { status: 'settled', blockNumber: inclusion.blockNumber, gasUsed: inclusion.gasUsed }
          : { status: 'failed', cause: 'reverted', blockNumber: inclusion.blockNumber, gasUsed: inclusion.gasUsed },
      )
    : await completeSettlement(deps.pool, key, { status: 'pending', cause: 'inclusion_timeout' });
  return outcomeOfRecord(record);
}

export { sleep };
