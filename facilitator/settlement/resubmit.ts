// Submitting the transfer again at a new gas nonce after its cancel was mined, or after a
// revert with the authorization unused (the chain only stalled, or the payer topped up, and
// the payer asked to pay for this call), within bounds.
import { Transaction } from 'ethers';
import { pendingNonce, signedTransactionHash, simulate } from '../chain.ts';
import { signedAttempts, storeResubmission } from '../store/gas.ts';
import type { SettlementRecord } from '../store/records.ts';
import { gasNonceOf, isCancelRaw, signedByOurWallet, signedOrThrow, type Signed } from './signed.ts';
import type { SettlementDeps } from './types.ts';

/**
 * Times the transfer is submitted again after a mined cancel: each round costs a cancel's gas,
 * so a chain that stalls again and again does not turn one payment into many of them.
 */
const MAX_RESUBMISSIONS = 2;

/**
 * Submits the transfer again after its cancel was mined: the same calldata and gas limit, the
 * gas wallet's next nonce and the market's fees, stored before it is sent (storeResubmission).
 * Null when the bound is reached, when the transfer would now revert (the payer drained its
 * balance meanwhile, say: no gas is spent on it, and the record waits for validBefore), when
 * the transfer is another gas wallet's, or when another run already decided the record.
 */
export async function resubmit(deps: SettlementDeps, record: SettlementRecord): Promise<Signed | null> {
  const stored = await signedAttempts(deps.pool, record.key);
  const transfer = stored.find((a) => !isCancelRaw(a.rawTx));
  if (!transfer || record.gasNonce === null) return null;
  if (new Set(stored.map((a) => gasNonceOf(a.rawTx))).size > MAX_RESUBMISSIONS) return null;
  const tx = Transaction.from(transfer.rawTx);
  if (!signedByOurWallet(deps, tx)) return null;
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
      return { raw, hash: signedTransactionHash(raw) };
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
