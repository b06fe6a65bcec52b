// Step 4's wait: first-block inclusion of any of the settlement's attempts, re-sending bytes
// the node seems to have lost and bumping the fees of a transaction left unmined too long.
import { setTimeout as sleep } from 'node:timers/promises';
import { getAddress, type TransactionReceipt } from 'ethers';
import { sendRaw } from '../chain.ts';
import type { SignedAttempt } from '../store/gas.ts';
import { markBroadcast, type SettlementRecord } from '../store/records.ts';
import { nextSeq, replaceAtGasNonce } from './replace.ts';
import { isCancel, type Signed } from './signed.ts';
import type { Inclusion, SettlementDeps, SettlementOutcome } from './types.ts';

const POLL_MS = [0, 10, 25, 50, 100, 200, 400, 800];
const REBROADCAST_EVERY_MS = 3_000;

/** A mined receipt's fields, as ethers' TransactionReceipt names them (the sync send's raw one is decoded to these). */
type MinedReceipt = Pick<
  TransactionReceipt,
  'status' | 'blockNumber' | 'gasUsed' | 'gasPrice' | 'hash' | 'from' | 'to'
>;

/** What a mined receipt says of the attempt it names: whether it succeeded, and whether it was the cancel. */
export function inclusionOf(receipt: MinedReceipt): Inclusion {
  return {
    mined: true,
    success: receipt.status === 1,
    blockNumber: receipt.blockNumber,
    gasUsed: receipt.gasUsed,
    gasPrice: receipt.gasPrice,
    txHash: receipt.hash,
    cancelled: isCancel(receipt),
  };
}

/**
 * Polls for a receipt of any attempt until `untilMs`; re-sends the latest bytes whenever the
 * node seems to have lost them, and bumps the fees of a transaction left unmined too long.
 */
export async function awaitInclusion(
  deps: SettlementDeps,
  record: Signed,
  attempts: SignedAttempt[],
  untilMs: number,
  beat: () => void = () => undefined,
): Promise<Inclusion> {
  const watched = [...attempts];
  const { afterMs, max } = deps.config.feeBump;
  let lastSend = Date.now();
  let lastBump = Date.now();
  for (let i = 0; ; i++) {
    const receipts = await Promise.all(watched.map((a) => deps.provider.getTransactionReceipt(a.txHash)));
    const receipt = receipts.find((r) => r !== null);
    if (receipt) return inclusionOf(receipt);
    if (Date.now() >= untilMs) return { mined: false };
    const latest = watched[watched.length - 1];
    if (afterMs > 0 && watched.length <= max && Date.now() - lastBump >= afterMs) {
      lastBump = Date.now();
      const bumped = await replaceAtGasNonce(deps, record.key, latest, nextSeq(watched), 'bump');
      if (bumped && !watched.some((a) => a.txHash === bumped.txHash)) {
        watched.push(bumped);
        lastSend = Date.now();
        // A node refusing the replacement (underpriced for its rules) still holds the earlier one.
        await Promise.all([
          sendRaw(deps.provider, bumped.rawTx, bumped.txHash).catch(() => undefined),
          markBroadcast(deps.pool, record.key),
        ]);
        continue;
      }
    }
    if (Date.now() - lastSend >= REBROADCAST_EVERY_MS) {
      lastSend = Date.now();
      const known = await deps.provider.getTransaction(latest.txHash);
      if (!known) await sendRaw(deps.provider, latest.rawTx, latest.txHash).catch(() => undefined);
    }
    beat();
    await sleep(Math.min(POLL_MS[Math.min(i + 1, POLL_MS.length - 1)], Math.max(untilMs - Date.now(), 0)));
  }
}

/** What the record will say once `inclusion` (a transfer mined and successful) is recorded: the caller's answer, given before the write. */
export function outcomeOfInclusion(
  record: SettlementRecord,
  inclusion: Inclusion & { mined: true },
): SettlementOutcome {
  // The transaction in lowercase hex (SettlementWorkflow's TxHash search attribute is set from it).
  return {
    status: 'settled',
    payer: getAddress(record.payer),
    transaction: inclusion.txHash.toLowerCase(),
    cause: null,
  };
}
