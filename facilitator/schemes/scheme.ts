// What a payment scheme is to the facilitator: the kind it settles (/supported lists it) and its
// handling of a /settle request of that kind, which answers in the domain's words (SettleAnswer);
// the service (facilitator-service/settle.ts) maps them to HTTP. The registry (index.ts)
// dispatches by (scheme, network).
import type { JsonRpcProvider } from 'ethers';
import type pg from 'pg';
import type { Logger } from '../../lib/log.ts';
import type { SettleRequest } from '../../x402/schemas.ts';
import type { Account } from '../accounts.ts';
import type { FacilitatorConfig } from '../config.ts';
import type { SettlementRunner } from '../settlement/runner.ts';
import type { SettlementOutcome } from '../settlement/types.ts';

/** A kind of payment the facilitator settles, as /supported lists it (`extra`: what its clients must know, e.g. upto's facilitatorAddress, batch-settlement's receiverAuthorizer). */
export type SupportedKind = {
  x402Version: 1 | 2;
  scheme: string;
  network: string;
  asset: string;
  extra?: Record<string, string>;
};

/**
 * A scheme's answer to a /settle request: a settlement outcome (settled, or failed before or
 * after any claim), or why there is none yet or ever: the request is not the scheme's (malformed),
 * the facilitator is not ready, a dependency is unreachable (unavailable), the transfer may
 * still land (in_progress), or a guardrail refused it (limit).
 */
export type SettleAnswer =
  /** `charged`: the amount an upto or batch-settlement settlement moved (its answer names it; 0 moves nothing and names no transaction). */
  | {
      answer: 'outcome';
      outcome: SettlementOutcome;
      charged?: { amount: string; network: string };
      /** What a settled answer adds under `extra` (a batch-settlement channel's state after it). */
      extra?: Record<string, unknown>;
    }
  | { answer: 'malformed' | 'not_ready' | 'unavailable' | 'in_progress' | 'limit' };

/** What every scheme's handler is built with. */
export type SchemeDeps = {
  config: FacilitatorConfig;
  log: Logger;
  /** Whether the facilitator can settle now (the chain answers, the gas wallet holds enough). */
  readiness: { current(): Promise<{ ready: boolean }> };
  /** The owner a request is handed to once admitted (facilitator-service/owner.ts). */
  settlements: SettlementRunner;
  /** The chain, for what a scheme reads before it names a settlement (batch-settlement's channel state). */
  chain: JsonRpcProvider;
  /** The facilitator's records, for what a scheme asks of them first (who deposited into a channel). */
  pool: pg.Pool;
};

/**
 * Handles a /settle request of the scheme's kind from the account its client certificate maps to,
 * answering by `deadline` (ms). `request`: the body parsed as a v1 settle request (null when it
 * is none: an x402 v2 body); `body`: the body as sent, for a scheme that reads more of it.
 */
export type Settler = (
  request: SettleRequest | null,
  from: { account: Account; deadline: number; body?: unknown },
) => Promise<SettleAnswer>;

/** A scheme's answer to a /verify request: the x402 verify response, or why there is none. */
export type VerifyAnswer =
  | {
      answer: 'verified';
      response: { isValid: boolean; invalidReason?: string; payer: string; extra?: Record<string, unknown> };
    }
  | { answer: 'malformed' | 'unavailable' };

/** Checks a payment of the scheme's kind without settling it (body: the x402 v2 verify request as sent). */
export type Verifier = (body: unknown) => Promise<VerifyAnswer>;

/** One registry entry: a scheme's facilitator part. */
export type FacilitatorScheme = {
  /** The kind it settles on this deployment. */
  kind(config: FacilitatorConfig): SupportedKind;
  settler(deps: SchemeDeps): Settler;
  /** The network names /settle takes for the kind (default: the kind's own). */
  networks?(config: FacilitatorConfig): string[];
  /** Its /verify, where it offers one (batch-settlement: the spec has servers verify deposits and refunds). */
  verifier?(deps: SchemeDeps): Verifier;
  /** The addresses that send its transactions, where its clients must know them (/supported `signers`). */
  signers?(config: FacilitatorConfig): string[];
};
