// Steps 4 to 6: broadcast the stored bytes, wait for first-block inclusion, record the
// outcome; and the long watch after an inclusion timeout. Every send is of the bytes stored
// at signing, so a retry, a rebroadcast or a second worker after a crash can only ever put
// that one transaction on chain (same hash, same gas nonce).
import { Context } from '@temporalio/activity';
import type { TransactionReceipt } from 'ethers';
import { sendRaw } from '../../facilitator/chain.ts';
import { completeSettlement, findSettlement, markBroadcast, type SettlementRecord } from '../../facilitator/store.ts';
import { outcomeOfRecord } from './verify.ts';
import type { Inclusion, SettlementDeps, SettlementOutcome } from './types.ts';

const POLL_MS = [0, 25, 50, 100, 200, 400, 800];
const REBROADCAST_EVERY_MS = 3_000;
const WATCH_POLL_MS = 2_000;

async function signedRecord(deps: SettlementDeps, key: string): Promise<SettlementRecord & { rawTx: string; txHash: string }> {
  const record = await findSettlement(deps.pool, key);
  if (!record?.rawTx || !record.txHash) throw new Error('no signed transaction stored for this settlement');
  return record as SettlementRecord & { rawTx: string; txHash: string };
}

function inclusionOf(receipt: TransactionReceipt): Inclusion {
  return { mined: true, success: receipt.status === 1, blockNumber: receipt.blockNumber, gasUsed: receipt.gasUsed.toString() };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function createSendActivities(deps: SettlementDeps) {
  /** Polls for the receipt, re-sending the same bytes whenever the node seems to have lost them. */
  async function pollInclusion(record: { rawTx: string; txHash: string }, untilMs: number, beat: () => void): Promise<Inclusion> {
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

  return {
    async broadcastSettlement(key: string): Promise<void> {
      const record = await signedRecord(deps, key);
      // The bytes are already stored (signSettlement), so counting the attempt can run alongside the send.
      await Promise.all([sendRaw(deps.provider, record.rawTx, record.txHash), markBroadcast(deps.pool, key)]);
    },

    async awaitInclusion(key: string, timeoutMs: number): Promise<Inclusion> {
      const record = await signedRecord(deps, key);
      return pollInclusion(record, Date.now() + timeoutMs, () => undefined);
    },

    async recordInclusion(key: string, inclusion: Inclusion): Promise<SettlementOutcome> {
      const record = inclusion.mined
        ? await completeSettlement(
            deps.pool,
            key,
            inclusion.success
              ? { status: 'settled', blockNumber: inclusion.blockNumber, gasUsed: BigInt(inclusion.gasUsed) }
              : { status: 'failed', cause: 'reverted', blockNumber: inclusion.blockNumber, gasUsed: BigInt(inclusion.gasUsed) },
          )
        : await completeSettlement(deps.pool, key, { status: 'pending', cause: 'inclusion_timeout' });
      return outcomeOfRecord(record);
    },

    /**
     * After an inclusion timeout: keeps watching (and re-sending the same bytes) until the
     * transaction is mined, then records the real outcome. A mined transaction is final either
     * way, even a revert, so this always ends once the gas wallet can pay for it.
     */
    async watchSettlement(key: string): Promise<SettlementOutcome> {
      const record = await signedRecord(deps, key);
      if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
      const context = Context.current();
      for (;;) {
        const inclusion = await pollInclusion(record, Date.now() + WATCH_POLL_MS * 5, () => context.heartbeat());
        if (inclusion.mined) {
          const done = await completeSettlement(
            deps.pool,
            key,
            inclusion.success
              ? { status: 'settled', blockNumber: inclusion.blockNumber, gasUsed: BigInt(inclusion.gasUsed) }
              : { status: 'failed', cause: 'reverted', blockNumber: inclusion.blockNumber, gasUsed: BigInt(inclusion.gasUsed) },
          );
          return outcomeOfRecord(done);
        }
        context.heartbeat();
        await sleep(WATCH_POLL_MS);
      }
    },
  };
}
