// Replacing a transaction at its gas nonce, stored before it is sent. Fee bumping: a
// transaction not mined after `feeBump.afterMs` is re-signed with the same gas nonce and fees
// raised by `feeBump.percent` (nodes replace a pending transaction only for at least +12.5 % on
// both fees), stored as the next attempt, then sent; every attempt stays watched, and whichever
// is mined is the settlement's transaction. Cancelling: a transfer still unmined at the
// inclusion timeout is replaced at its gas nonce by a cancel (a zero-value send from the gas
// wallet to itself, higher fees), so the two can no longer both land: whichever is mined
// decides the outcome (outcome.ts).
import { Transaction } from 'ethers';
import { sendRaw, signedTransactionHash } from '../chain.ts';
import { storeFeeBump, type SignedAttempt } from '../store/gas.ts';
import { markBroadcast } from '../store/records.ts';
import { attemptsOf, isCancelRaw, signedByOurWallet, type Signed } from './signed.ts';
import type { SettlementDeps } from './types.ts';

/** Gas of a cancel: a plain value transfer. */
const CANCEL_GAS_LIMIT = 21_000n;

const raised = (fee: bigint, percent: number) => (fee * BigInt(100 + percent) + 99n) / 100n + 1n;

/**
 * Re-signs the latest attempt at its gas nonce with higher fees, as the same transaction (a fee
 * bump: same calldata and gas limit) or as a cancel, and stores it before returning it: nothing
 * is sent that is not stored first. Null when the record no longer waits for inclusion or the
 * transaction is not the gas wallet's.
 */
export async function replaceAtGasNonce(
  deps: SettlementDeps,
  key: string,
  latest: SignedAttempt,
  seq: number,
  as: 'bump' | 'cancel',
): Promise<SignedAttempt | null> {
  const tx = Transaction.from(latest.rawTx);
  if (!signedByOurWallet(deps, tx) || tx.maxFeePerGas === null || tx.maxPriorityFeePerGas === null) return null;
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
    txHash: signedTransactionHash(raw),
    rawTx: raw,
    maxFeePerGas,
    maxPriorityFeePerGas,
  });
}

export const nextSeq = (attempts: SignedAttempt[]) => attempts.reduce((max, a) => Math.max(max, a.seq), -1) + 1;

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
