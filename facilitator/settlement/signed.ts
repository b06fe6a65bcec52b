// What a settlement has signed: its stored attempts (the transfer, its fee bumps, a cancel),
// all at the one gas nonce the settlement took (or, after a mined cancel, the re-submission's),
// so a retry, a rebroadcast or a second worker after a crash can only ever put one on chain.
import { Transaction } from 'ethers';
import { signedAttempts, type SignedAttempt } from '../store/gas.ts';
import type { SettlementRecord } from '../store/records.ts';
import type { SettlementDeps } from './types.ts';

export type Signed = SettlementRecord & { rawTx: string; txHash: string };

export function signedOrThrow(record: SettlementRecord | null): Signed {
  if (!record?.rawTx || !record.txHash) throw new Error('no signed transaction stored for this settlement');
  return record as Signed;
}

/** A cancel is the gas wallet's send to itself; a transfer goes to the token contract. */
export const isCancel = (tx: { from?: string | null; to?: string | null }) =>
  !!tx.to && !!tx.from && tx.to.toLowerCase() === tx.from.toLowerCase();

/**
 * Whether `tx` was signed by this worker's gas wallet: only then are its gas nonce and its
 * replacements (a fee bump, a cancel, a re-submission) this worker's to sign. A worker holding
 * another key (a rotated wallet, another deployment on the same database) delivers such bytes
 * as they are, and signs nothing for them.
 */
export const signedByOurWallet = (deps: Pick<SettlementDeps, 'signer'>, tx: { from?: string | null }) =>
  tx.from?.toLowerCase() === deps.signer.address.toLowerCase();

/** The gas nonce of signed bytes. */
export const gasNonceOf = (rawTx: string) => Transaction.from(rawTx).nonce;

/** Whether these signed bytes are a cancel. */
export const isCancelRaw = (rawTx: string) => isCancel(Transaction.from(rawTx));

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
