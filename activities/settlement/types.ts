// Types shared by the settlement steps and SettlementWorkflow. What the two activities return
// lands in the workflow history, so it holds addresses, amounts, hashes and causes: never the
// signed authorization or the raw transaction carrying it (those stay in PostgreSQL, loaded
// by key). Amounts are decimal strings.
import type pg from 'pg';
import type { JsonRpcProvider } from 'ethers';
import type { FacilitatorConfig } from '../../facilitator/config.ts';
import type { TransactionSigner } from '../../facilitator/signer.ts';
import type { FeeOracle } from '../../facilitator/fees.ts';
import type { GuardrailRejection } from '../../facilitator/store/claims.ts';

export type SettlementDeps = {
  pool: pg.Pool;
  provider: JsonRpcProvider;
  signer: TransactionSigner;
  fees: FeeOracle;
  config: FacilitatorConfig;
};

/** The fees and gas the transfer is signed with; chosen at verification, from the node. */
export type GasPlan = { gasLimit: bigint; maxFeePerGas: bigint; maxPriorityFeePerGas: bigint; chainNonce: number };

export type VerifiedTransfer = { payer: string; payTo: string; amount: bigint; validBefore: bigint };

/** The result of the steps before anything can reach the chain (re-verify, guardrails, sign). */
export type Prepared =
  /** Signed and stored (now, or by an earlier run): the transaction to deliver. */
  | { step: 'signed'; payer: string; txHash: string }
  /** Re-verification refused it; recorded as failed with `cause`. */
  | { step: 'rejected'; payer: string; cause: string }
  /** A guardrail refused it; nothing was claimed or written. */
  | { step: 'refused'; payer: string; guardrail: GuardrailRejection }
  /** Already settled or failed: the stored answer. */
  | { step: 'final'; outcome: SettlementOutcome };

/** First-block inclusion of one of the settlement's attempts (`txHash`: the one mined; `cancelled`: it was the cancel). */
export type Inclusion =
  | {
      mined: true;
      success: boolean;
      blockNumber: number;
      gasUsed: bigint;
      gasPrice: bigint;
      txHash: string;
      cancelled: boolean;
    }
  | { mined: false };

/** The workflow's result and the facilitator's answer. `cause` is for operators only. */
export type SettlementOutcome = {
  status: 'settled' | 'failed' | 'pending' | 'rejected';
  payer: string;
  transaction: string | null;
  cause: string | null;
};

/**
 * `settle` runs every step in one local activity (SettlementWorkflow since the
 * `settlement-one-activity` patch): it retries without limit, but gives up with `unavailable`
 * after five minutes only while it is sure no signed bytes exist (giving up is then safe).
 * `prepareSettlement` and `deliverSettlement` are the same steps split along that boundary,
 * kept for runs started before the patch. `watchSettlement` keeps watching after an
 * inclusion timeout.
 */
export interface SettlementActivities {
  settle(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
  prepareSettlement(key: string): Promise<Prepared>;
  deliverSettlement(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
  watchSettlement(key: string): Promise<SettlementOutcome>;
}
