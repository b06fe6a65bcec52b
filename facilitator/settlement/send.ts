// Steps 4 to 6: broadcast the stored bytes, wait for first-block inclusion, record the
// outcome; and the long watch after an inclusion timeout. Every send is of bytes stored
// before they are sent, all with the one gas nonce the settlement took, so a retry, a
// rebroadcast or a second worker after a crash can only ever put one of them on chain.
// Fee bumping: a transaction not mined after `feeBump.afterMs` is re-signed with the same gas
// nonce and fees raised by `feeBump.percent` (nodes replace a pending transaction only for at
// least +12.5 % on both fees), stored as the next attempt, then sent; every attempt stays
// watched, and whichever is mined is the settlement's transaction.
// Cancelling: a transfer still unmined at the inclusion timeout is replaced at its gas nonce by
// a cancel (a zero-value send from the gas wallet to itself, higher fees), so the two can no
// longer both land: whichever is mined decides the outcome, and a mined cancel makes the
// `success: false` the caller gets final (the transfer can never land afterwards).
import { Transaction, getAddress, zeroPadValue, type TransactionReceipt } from 'ethers';
import { authorizationUsed, rpcNow, sendRaw, tokenInterface } from '../chain.ts';
import { signedAttempts, storeFeeBump, type SignedAttempt } from '../store/gas.ts';
import {
  completeSettlement,
  markBroadcast,
  parseSettlementKey,
  type FinalOutcome,
  type SettlementRecord,
} from '../store/records.ts';
import { outcomeOfRecord } from './verify.ts';
import { failedGasWei } from '../../lib/observability/metrics.ts';
import type { Inclusion, SettlementDeps, SettlementOutcome } from './types.ts';

export type Signed = SettlementRecord & { rawTx: string; txHash: string };

const POLL_MS = [0, 10, 25, 50, 100, 200, 400, 800];
const REBROADCAST_EVERY_MS = 3_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function signedOrThrow(record: SettlementRecord | null): Signed {
  if (!record?.rawTx || !record.txHash) throw new Error('no signed transaction stored for this settlement');
  return record as Signed;
}

/** Gas of a cancel: a plain value transfer. */
const CANCEL_GAS_LIMIT = 21_000n;

/** A cancel is the gas wallet's send to itself; a transfer goes to the token contract. */
const isCancel = (tx: { from?: string | null; to?: string | null }) =>
  !!tx.to && !!tx.from && tx.to.toLowerCase() === tx.from.toLowerCase();

/** Whether these signed bytes are a cancel. */
export const isCancelRaw = (rawTx: string) => isCancel(Transaction.from(rawTx));

function inclusionOf(receipt: TransactionReceipt): Inclusion {
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

/** The attempts to watch: the stored ones, and the record's current bytes (records from before attempts were stored). */
export async function attemptsOf(deps: SettlementDeps, record: Signed): Promise<SignedAttempt[]> {
  const stored = await signedAttempts(deps.pool, record.key);
  if (stored.some((a) => a.txHash === record.txHash)) return stored;
  return [
    ...stored,
    { seq: stored.length, txHash: record.txHash, rawTx: record.rawTx, maxFeePerGas: null, maxPriorityFeePerGas: null },
  ];
}

/** The first attempt of a record this worker just signed (no read back). */
export function firstAttempt(record: Signed): SignedAttempt[] {
  return [{ seq: 0, txHash: record.txHash, rawTx: record.rawTx, maxFeePerGas: null, maxPriorityFeePerGas: null }];
}

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
        return {
          mined: true,
          success: Number(receipt.status) === 1,
          blockNumber: Number(receipt.blockNumber),
          gasUsed: BigInt(receipt.gasUsed),
          gasPrice: BigInt(receipt.effectiveGasPrice ?? 0),
          txHash: receipt.transactionHash,
          cancelled: isCancel(receipt),
        };
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

const raised = (fee: bigint, percent: number) => (fee * BigInt(100 + percent) + 99n) / 100n + 1n;

/**
 * Re-signs the latest attempt at its gas nonce with higher fees, as the same transaction (a fee
 * bump: same calldata and gas limit) or as a cancel, and stores it before returning it: nothing
 * is sent that is not stored first. Null when the record no longer waits for inclusion or the
 * transaction is not the gas wallet's.
 */
async function replaceAtGasNonce(
  deps: SettlementDeps,
  key: string,
  latest: SignedAttempt,
  seq: number,
  as: 'bump' | 'cancel',
): Promise<SignedAttempt | null> {
  const tx = Transaction.from(latest.rawTx);
  if (
    tx.from?.toLowerCase() !== deps.signer.address.toLowerCase() ||
    tx.maxFeePerGas === null ||
    tx.maxPriorityFeePerGas === null
  )
    return null;
  const market = await deps.fees.current();
  const maxPriorityFeePerGas = [
    raised(tx.maxPriorityFeePerGas, deps.config.feeBump.percent),
    market.maxPriorityFeePerGas,
  ].reduce((a, b) => (a > b ? a : b));
  const maxFeePerGas = [
    raised(tx.maxFeePerGas, deps.config.feeBump.percent),
    market.maxFeePerGas,
    maxPriorityFeePerGas,
  ].reduce((a, b) => (a > b ? a : b));
  const payload =
    as === 'cancel'
      ? { to: deps.signer.address, data: '0x', gasLimit: CANCEL_GAS_LIMIT, value: 0n }
      : { to: tx.to, data: tx.data, gasLimit: tx.gasLimit, value: tx.value };
  const raw = await deps.signer.signTransaction({
    type: 2,
    chainId: tx.chainId,
    nonce: tx.nonce,
    maxFeePerGas,
    maxPriorityFeePerGas,
    ...payload,
  });
  return storeFeeBump(deps.pool, key, {
    seq,
    txHash: Transaction.from(raw).hash!,
    rawTx: raw,
    maxFeePerGas,
    maxPriorityFeePerGas,
  });
}

const nextSeq = (attempts: SignedAttempt[]) => attempts.reduce((max, a) => Math.max(max, a.seq), -1) + 1;

/**
 * After the inclusion timeout: replaces the transfer at its gas nonce with a cancel (stored,
 * then sent), unless the latest attempt already is one. Returns every attempt to watch. A node
 * refusing the cancel (the transfer already mined, or it keeps the transfer) is no failure:
 * the watch then finds whichever of them is mined.
 */
export async function cancelAtGasNonce(deps: SettlementDeps, record: Signed): Promise<SignedAttempt[]> {
  const attempts = await attemptsOf(deps, record);
  const latest = attempts[attempts.length - 1];
  if (isCancelRaw(latest.rawTx)) return attempts;
  const cancel = await replaceAtGasNonce(deps, record.key, latest, nextSeq(attempts), 'cancel');
  if (!cancel) return attempts;
  await Promise.all([
    sendRaw(deps.provider, cancel.rawTx, cancel.txHash).catch(() => undefined),
    markBroadcast(deps.pool, record.key),
  ]);
  return attempts.some((a) => a.txHash === cancel.txHash) ? attempts : [...attempts, cancel];
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

/** What the record will say once `inclusion` (a mined transfer, not a cancel) is recorded: the caller's answer, given before the write. */
export function outcomeOfInclusion(
  record: SettlementRecord,
  inclusion: Inclusion & { mined: true },
): SettlementOutcome {
  // The transaction in lowercase hex (SettlementWorkflow's TxHash search attribute is set from it).
  const transaction = inclusion.txHash.toLowerCase();
  return inclusion.success
    ? { status: 'settled', payer: getAddress(record.payer), transaction, cause: null }
    : { status: 'failed', payer: getAddress(record.payer), transaction, cause: 'reverted' };
}

/** How far back the log of a payer's authorization is looked for (about two days of Base blocks). */
const AUTHORIZATION_LOG_BLOCKS = 100_000;

/**
 * After a mined cancel. The payer's authorization itself stays valid until its validBefore, and
 * its signature was public in the node's pool, so anyone could still submit it: the outcome is
 * final only once the chain has a block at or past validBefore (no later block can include it).
 * Then the token says whether it was used: settled (by whoever submitted it) or not (failed).
 */
async function afterCancel(
  deps: SettlementDeps,
  record: SettlementRecord,
  cancel: Inclusion & { mined: true },
): Promise<FinalOutcome> {
  const latest = await deps.provider.getBlock('latest');
  if (!latest || BigInt(latest.timestamp) < record.validBefore)
    return { status: 'pending', cause: 'inclusion_timeout' };
  const token = deps.config.tokenAddress;
  const { nonce } = parseSettlementKey(record.key);
  if (!(await authorizationUsed(deps.provider, token, record.payer, nonce))) {
    return {
      status: 'failed',
      cause: 'inclusion_timeout',
      blockNumber: cancel.blockNumber,
      gasUsed: cancel.gasUsed,
      txHash: cancel.txHash,
    };
  }
  const topics = [tokenInterface.getEvent('AuthorizationUsed')!.topicHash, zeroPadValue(record.payer, 32), nonce];
  const logs = await deps.provider.getLogs({
    address: token,
    topics,
    fromBlock: Math.max(latest.number - AUTHORIZATION_LOG_BLOCKS, 0),
    toBlock: latest.number,
  });
  const used = logs[0];
  if (!used) throw new Error('authorization used but its log was not found');
  return { status: 'settled', blockNumber: used.blockNumber, gasUsed: 0n, txHash: used.transactionHash };
}

/** Records a mined attempt's outcome, or `pending` (not mined, or a cancel mined before validBefore). */
export async function recordInclusion(
  deps: SettlementDeps,
  record: SettlementRecord,
  inclusion: Inclusion,
): Promise<SettlementOutcome> {
  let outcome: FinalOutcome;
  if (!inclusion.mined) outcome = { status: 'pending', cause: 'inclusion_timeout' };
  else if (inclusion.cancelled) outcome = await afterCancel(deps, record, inclusion);
  else if (inclusion.success)
    outcome = {
      status: 'settled',
      blockNumber: inclusion.blockNumber,
      gasUsed: inclusion.gasUsed,
      txHash: inclusion.txHash,
    };
  else {
    outcome = {
      status: 'failed',
      cause: 'reverted',
      blockNumber: inclusion.blockNumber,
      gasUsed: inclusion.gasUsed,
      txHash: inclusion.txHash,
      failedGasWei: inclusion.gasUsed * inclusion.gasPrice,
    };
  }
  const recorded = await completeSettlement(deps.pool, record.key, outcome);
  // Counted by the run whose statement recorded it (a watcher may record the same revert again).
  if (recorded.completedNow && outcome.status === 'failed' && outcome.failedGasWei)
    failedGasWei.inc({ account: recorded.accountId }, Number(outcome.failedGasWei));
  return outcomeOfRecord(recorded);
}

export { sleep };
