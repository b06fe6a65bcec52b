// What the settlement activities hand back to SettlementWorkflow. Everything here lands in
// the workflow history, so it holds ids, addresses, amounts and hashes: never the signed
// authorization (that stays in PostgreSQL, loaded by key). Amounts are decimal strings.
import type pg from 'pg';
import type { JsonRpcProvider } from 'ethers';
import type { FacilitatorConfig } from '../../facilitator/config.ts';
import type { TransactionSigner } from '../../facilitator/signer.ts';
import type { GuardrailRejection, SettlementStatus } from '../../facilitator/store.ts';

export type SettlementDeps = {
  pool: pg.Pool;
  provider: JsonRpcProvider;
  signer: TransactionSigner;
  config: FacilitatorConfig;
};

/** The fees and gas the transfer is signed with; chosen at verification, from the node. */
export type GasPlan = { gasLimit: string; maxFeePerGas: string; maxPriorityFeePerGas: string; chainNonce: number };

export type VerifiedTransfer = { payer: string; payTo: string; amount: string; validBefore: string };

export type VerifyStep =
  /** Checks passed; the claim comes next. */
  | { step: 'verified'; transfer: VerifiedTransfer; gas: GasPlan }
  /** Re-verification refused it; recorded as failed with `cause`. */
  | { step: 'rejected'; payer: string; cause: string }
  /** A record already carries signed bytes (a resumed run): go straight to the chain. */
  | { step: 'sent'; payer: string; txHash: string }
  /** Already settled or failed: the stored answer. */
  | { step: 'final'; outcome: SettlementOutcome };

export type ClaimStep = { claimed: true; status: SettlementStatus } | { claimed: false; rejected: GuardrailRejection };

export type Inclusion =
  | { mined: true; success: boolean; blockNumber: number; gasUsed: string }
  | { mined: false };

/** The workflow's result and the facilitator's answer. `cause` is for operators only. */
export type SettlementOutcome = {
  status: 'settled' | 'failed' | 'pending' | 'rejected';
  payer: string;
  transaction: string | null;
  cause: string | null;
};

export interface SettlementActivities {
  verifySettlement(key: string): Promise<VerifyStep>;
  claimSettlement(key: string, transfer: VerifiedTransfer): Promise<ClaimStep>;
  signSettlement(key: string, gas: GasPlan): Promise<{ txHash: string }>;
  broadcastSettlement(key: string): Promise<void>;
  awaitInclusion(key: string, timeoutMs: number): Promise<Inclusion>;
  recordInclusion(key: string, inclusion: Inclusion): Promise<SettlementOutcome>;
  watchSettlement(key: string): Promise<SettlementOutcome>;
}
