// Types shared by the settlement steps, their activities and SettlementWorkflow. What a step
// returns lands in the workflow history, so it holds addresses, amounts, hashes and causes:
// never the signed authorization or the raw transaction carrying it (those stay in PostgreSQL,
// loaded by key). Amounts are decimal strings.
import type pg from 'pg';
import type { JsonRpcProvider } from 'ethers';
import type { FacilitatorConfig } from '../config.ts';
import type { TransactionSigner } from '../signer.ts';
import type { FeeOracle } from '../fees.ts';
import type { GuardrailRejection } from '../store/reservations.ts';

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

/** Step 1's verdict: what the settlement moves and the gas plan to sign it with, or why it must not be settled. */
export type Reverified = { ok: true; transfer: VerifiedTransfer; gas: GasPlan } | { ok: false; cause: string };

/** The facilitator's answer for one settlement (the workflow's result). `cause` is for operators only. */
export type SettlementOutcome = {
  status: 'settled' | 'failed' | 'pending' | 'rejected';
  payer: string;
  transaction: string | null;
  cause: string | null;
};

/** A step that decided the settlement: nothing further runs. */
export type Decided = { step: 'decided'; outcome: SettlementOutcome };

/** Step 1, re-verification: go on to the reservation, go straight to delivery (bytes stored before), or decided. */
export type Verified =
  { step: 'verified'; payer: string } | { step: 'signed'; payer: string; txHash: string } | Decided;

/** Step 2, guardrails, the nonce reservation and signing: the stored transaction to deliver, or decided. */
export type Reserved = { step: 'signed'; payer: string; txHash: string } | Decided;

/** Step 3, broadcast of the stored bytes: sent (`mined` when the node answered with the receipt), or decided before. */
export type Broadcast = { step: 'sent'; txHash: string; mined: boolean } | Decided;

/** The result of the steps before anything can reach the chain (re-verify, guardrails, sign); runs before the per-step workflow. */
export type Prepared =
  /** Signed and stored (now, or by an earlier run): the transaction to deliver. */
  | { step: 'signed'; payer: string; txHash: string }
  /** Re-verification refused it; recorded as failed with `cause`. */
  | { step: 'rejected'; payer: string; cause: string }
  /** A guardrail refused it; nothing was reserved or written. */
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
