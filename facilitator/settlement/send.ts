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
// longer both land: whichever is mined decides the outcome. After a mined cancel the payer's
// authorization may still be valid: the transfer is then submitted again at a new gas nonce
// (the chain only stalled, and the payer asked to pay for this call), within bounds.
// A revert is checked against the token: the authorization used by someone else's transaction
// that paid this settlement is a settlement, never a failure.
import { Transaction, getAddress, type TransactionReceipt } from 'ethers';
import { authorizationUse, pendingNonce, rpcNow, sendRaw, simulate } from '../chain.ts';
import { signedAttempts, storeFeeBump, storeResubmission, type SignedAttempt } from '../store/gas.ts';
import {
  completeSettlement,
  markBroadcast,
  parseSettlementKey,
  type FinalOutcome,
  type SettlementRecord,
} from '../store/records.ts';
import { outcomeOfRecord } from './verify.ts';
import { failedGasWei } from '../metrics.ts';
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

/** The gas nonce of signed bytes. */
const gasNonceOf = (rawTx: string) => Transaction.from(rawTx).nonce;

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
  const all = await signedAttempts(deps.pool, record.key);
  // Only the record's gas nonce: after a re-submission, the earlier nonce's transfer and its
  // mined cancel are history (watching them would find that cancel again).
  const round = gasNonceOf(record.rawTx);
  const stored = all.filter((a) => gasNonceOf(a.rawTx) === round);
  if (stored.some((a) => a.txHash === record.txHash)) return stored;
  return [
    ...stored,
    { seq: all.length, txHash: record.txHash, rawTx: record.rawTx, maxFeePerGas: null, maxPriorityFeePerGas: null },
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

/** What the token says of this settlement's authorization as of `toBlock`. */
function authorizationUseOf(deps: SettlementDeps, record: SettlementRecord, toBlock: number) {
  const { nonce } = parseSettlementKey(record.key);
  return authorizationUse(
    deps.provider,
    deps.config.tokenAddress,
    { payer: record.payer, nonce, payTo: record.payTo, amount: record.amount },
    toBlock,
  );
}

/**
 * A mined transfer that reverted. When the token's authorization is used and that use paid
 * this settlement (someone else submitted the same authorization first: the payer's signature
 * was public in the node's pool; or, after a revert for want of balance, the payer or anyone
 * submitted it once the balance was back), the payer's money moved: the settlement is settled,
 * with the transaction that used the authorization, and never answered `success: false` (the
 * payer would sign and pay again, charged twice for one call). Used otherwise (the payer spent
 * or cancelled the nonce): failed, nothing was collected and nothing can be. Unused: the
 * reverted transaction is public with the signed authorization in its calldata, so anyone can
 * submit it again until validBefore, once the payer has the funds (or its wallet accepts the
 * signature again). A final failure now would make the payer sign and pay again, then be
 * charged a second time by the old authorization; so the record stays `pending` (answered
 * `503`) until the chain has a block at or past validBefore (then failed: it can no longer
 * land), or the authorization is used. While the chain is far enough from validBefore
 * (mayResubmit) and the transfer would now succeed (the payer topped up), it is submitted
 * again at a new gas nonce, within the bound shared with re-submissions after a cancel, so the
 * payer gets its call instead of waiting. The token is asked as of the node's latest block (at
 * least the revert's: a node behind it errors and the step retries), with that block's
 * timestamp as the chain's clock, so every use up to the moment of the record counts and the
 * log window ends where the state was read. Whatever the outcome, the revert's gas is charged
 * to the account's failed-gas budget, once (completeSettlement).
 */
async function afterRevert(
  deps: SettlementDeps,
  record: SettlementRecord,
  revert: Inclusion & { mined: true },
): Promise<FinalOutcome | { resubmitted: Signed }> {
  const failedGasWei = revert.gasUsed * revert.gasPrice;
  const charged = { failedGasWei, revertTxHash: revert.txHash };
  const latest = await deps.provider.getBlock('latest');
  if (!latest) throw new Error('the node has no latest block');
  const atBlock = Math.max(latest.number, revert.blockNumber);
  const use = await authorizationUseOf(deps, record, atBlock);
  if (use.used && use.paid)
    return {
      status: 'settled',
      blockNumber: use.paid.blockNumber,
      gasUsed: revert.gasUsed,
      txHash: use.paid.txHash,
      ...charged,
    };
  const failed = {
    status: 'failed' as const,
    cause: 'reverted',
    blockNumber: revert.blockNumber,
    gasUsed: revert.gasUsed,
    txHash: revert.txHash,
    ...charged,
  };
  // A latest block older than the revert's (a load-balanced node behind) says nothing of the
  // chain's clock now: not known, so the step retries.
  if (latest.number < revert.blockNumber) throw new Error('the node is behind the revert’s block');
  if (use.used || BigInt(latest.timestamp) >= record.validBefore) return failed;
  if (mayResubmit(deps.config, latest.timestamp, record.validBefore)) {
    const again = await resubmit(deps, record);
    if (again) return { resubmitted: again };
  }
  return { status: 'pending', cause: 'reverted', txHash: revert.txHash, ...charged };
}

/**
 * Times the transfer is submitted again after a mined cancel: each round costs a cancel's gas,
 * so a chain that stalls again and again does not turn one payment into many of them.
 */
const MAX_RESUBMISSIONS = 2;

/**
 * Submits the transfer again after its cancel was mined: the same calldata and gas limit, the
 * gas wallet's next nonce and the market's fees, stored before it is sent (storeResubmission).
 * Null when the bound is reached, when the transfer would now revert (the payer drained its
 * balance meanwhile, say: no gas is spent on it, and the record waits for validBefore), or when
 * another run already decided the record.
 */
async function resubmit(deps: SettlementDeps, record: SettlementRecord): Promise<Signed | null> {
  const stored = await signedAttempts(deps.pool, record.key);
  const transfer = stored.find((a) => !isCancelRaw(a.rawTx));
  if (!transfer || record.gasNonce === null) return null;
  if (new Set(stored.map((a) => gasNonceOf(a.rawTx))).size > MAX_RESUBMISSIONS) return null;
  const tx = Transaction.from(transfer.rawTx);
  const [refused, fees, chainNonce] = await Promise.all([
    simulate(deps.provider, { from: deps.signer.address, to: tx.to!, data: tx.data }),
    deps.fees.current(),
    pendingNonce(deps.provider, deps.signer.address),
  ]);
  if (refused) return null;
  const again = await storeResubmission(deps.pool, {
    key: record.key,
    fromGasNonce: record.gasNonce,
    gasWallet: deps.signer.address,
    chainId: Number(tx.chainId),
    chainNonce,
    sign: async (nonce) => {
      const raw = await deps.signer.signTransaction({
        type: 2,
        chainId: tx.chainId,
        nonce,
        to: tx.to,
        data: tx.data,
        gasLimit: tx.gasLimit,
        value: 0n,
        ...fees,
      });
      return { raw, hash: Transaction.from(raw).hash! };
    },
  });
  if (!again?.rawTx || again.status === 'settled' || again.status === 'failed') return null;
  return signedOrThrow(again);
}

/**
 * Whether a transfer whose cancel was mined at chain time `nowS` may be submitted again: the
 * authorization must outlive a whole inclusion timeout plus the validity margin. The chain just
 * stalled for at least that timeout, and a re-submitted transfer is never cancelled again: one
 * mined after validBefore reverts (its gas charged) and, unmined, it holds back the gas
 * wallet's later nonces.
 */
export function mayResubmit(
  config: { inclusionTimeoutMs: number; validityMarginSeconds: number },
  nowS: number,
  validBefore: bigint,
): boolean {
  const needS = Math.ceil(config.inclusionTimeoutMs / 1000) + config.validityMarginSeconds;
  return validBefore - BigInt(nowS) > BigInt(needS);
}

/**
 * After a mined cancel. The token decides first: an authorization used since (anyone could
 * submit it: its signature was public in the node's pool) is settled when that use paid this
 * settlement, failed when the payer used or cancelled its nonce otherwise. Unused while the
 * chain is still more than an inclusion timeout plus the validity margin before validBefore
 * (mayResubmit): the payer asked to pay for
 * this call and the chain only stalled, so the transfer is submitted again at a new gas nonce
 * (at most MAX_RESUBMISSIONS times). Unused closer to validBefore: `pending` until the chain has
 * a block at or past validBefore (no later block can include it), then failed.
 */
async function afterCancel(
  deps: SettlementDeps,
  record: SettlementRecord,
  cancel: Inclusion & { mined: true },
): Promise<FinalOutcome | { resubmitted: Signed }> {
  const latest = await deps.provider.getBlock('latest');
  if (!latest) throw new Error('the node has no latest block');
  const cancelled = {
    status: 'failed' as const,
    cause: 'inclusion_timeout',
    blockNumber: cancel.blockNumber,
    gasUsed: cancel.gasUsed,
    txHash: cancel.txHash,
  };
  const use = await authorizationUseOf(deps, record, latest.number);
  if (use.used)
    return use.paid
      ? { status: 'settled', blockNumber: use.paid.blockNumber, gasUsed: 0n, txHash: use.paid.txHash }
      : cancelled;
  if (mayResubmit(deps.config, latest.timestamp, record.validBefore)) {
    const again = await resubmit(deps, record);
    if (again) return { resubmitted: again };
  }
  return BigInt(latest.timestamp) < record.validBefore ? { status: 'pending', cause: 'inclusion_timeout' } : cancelled;
}

/**
 * Records a mined attempt's outcome, or `pending` (not mined; a cancel mined, or a transfer
 * reverted, with the authorization unused before validBefore; or a transfer submitted again
 * and not yet mined).
 */
export async function recordInclusion(
  deps: SettlementDeps,
  record: SettlementRecord,
  inclusion: Inclusion,
): Promise<SettlementOutcome> {
  let outcome: FinalOutcome;
  if (!inclusion.mined) outcome = { status: 'pending', cause: 'inclusion_timeout' };
  else if (inclusion.success && !inclusion.cancelled)
    outcome = {
      status: 'settled',
      blockNumber: inclusion.blockNumber,
      gasUsed: inclusion.gasUsed,
      txHash: inclusion.txHash,
    };
  else {
    const next = inclusion.cancelled
      ? await afterCancel(deps, record, inclusion)
      : await afterRevert(deps, record, inclusion);
    if ('resubmitted' in next) {
      // A revert's gas is charged before the re-submission moves the record to its new nonce.
      if (!inclusion.cancelled) await complete(deps, record.key, chargeOnly(inclusion));
      // Sent now; a node answering with the receipt (anvil, EIP-7966) decides it at once,
      // else the record waits (`pending`, its bytes now the submitted transfer's) for the watch.
      const included = await broadcast(deps, next.resubmitted);
      if (included?.mined) return recordInclusion(deps, next.resubmitted, included);
      outcome = { status: 'pending', cause: 'inclusion_timeout' };
    } else outcome = next;
  }
  // A watcher re-reading a revert that is still undecided writes (and announces) nothing new.
  if (
    outcome.status === 'pending' &&
    record.status === 'pending' &&
    record.failureCause === outcome.cause &&
    (!outcome.txHash || outcome.txHash.toLowerCase() === record.txHash?.toLowerCase())
  )
    return outcomeOfRecord(record);
  return outcomeOfRecord(await complete(deps, record.key, outcome));
}

/** Writes the outcome; a revert's gas is counted in the metric by the statement that charged it (a watcher may record the same revert again). */
async function complete(deps: SettlementDeps, key: string, outcome: FinalOutcome): Promise<SettlementRecord> {
  const recorded = await completeSettlement(deps.pool, key, outcome);
  if (recorded.gasChargedNow && outcome.failedGasWei)
    failedGasWei.inc({ account: recorded.accountId }, Number(outcome.failedGasWei));
  return recorded;
}

/** The revert's gas charged to the account's budget; the record stays `pending`, its bytes the re-submission's. */
function chargeOnly(revert: Inclusion & { mined: true }): FinalOutcome {
  return {
    status: 'pending',
    cause: 'reverted',
    failedGasWei: revert.gasUsed * revert.gasPrice,
    revertTxHash: revert.txHash,
  };
}

export { sleep };
