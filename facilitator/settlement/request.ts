// The request a settlement settles, of any scheme: an `exact` settle request (an EIP-3009
// authorization, settled for its value), an `upto` one (a Permit2 authorization of a maximum,
// settled for the charge the request names) or a `batch-settlement` one (a channel deposit,
// claim, settle or refund: verify-batch.ts). What the steps, the stored request and the
// settlement's owner read of it, whatever its scheme.
import { isDeepStrictEqual } from 'node:util';
import { getAddress } from 'ethers';
import type { ExactSettleRequest } from '../../x402/schemes/exact/schemas.ts';
import type { UptoSettleRequest } from '../../x402/schemes/upto/settle-request.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';
import type { BatchSettleRequest } from '../../x402/schemes/batch-settlement/settle-request.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { ERC3009_DEPOSIT_COLLECTOR_ADDRESS } from '../../contracts/batch-settlement.ts';

export type SettlementRequest = ExactSettleRequest | UptoSettleRequest | BatchSettleRequest;

/** An upto request carries its scheme at the top (an exact one carries its envelope there). */
export function isUptoRequest(request: SettlementRequest): request is UptoSettleRequest {
  return (request as { scheme?: unknown }).scheme === SCHEME_UPTO;
}

/** A batch-settlement request carries its scheme at the top, as an upto one does. */
export function isBatchRequest(request: SettlementRequest): request is BatchSettleRequest {
  return (request as { scheme?: unknown }).scheme === SCHEME_BATCH_SETTLEMENT;
}

/**
 * What the settlement moves: from the payer to the payee, the amount (an exact authorization's
 * value, an upto request's charge), before `validBefore` (Unix seconds, exclusive: an upto
 * authorization's Permit2 deadline is inclusive, so one past it). A batch-settlement request's
 * terms as far as the request alone says them (batchTerms).
 */
export type SettlementTerms = { payer: string; payTo: string; amount: bigint; validBefore: bigint };

/**
 * A batch-settlement request's terms before the chain is asked: a deposit moves its amount from
 * the payer to the ERC-3009 collector before its authorization's validBefore; a claim (for its
 * first row's receiver) and a settle (for its receiver) move what the chain says, known at
 * verification; a refund returns its resolved amount to the payer. Only a deposit has a window:
 * the others are 0, so a revert or a mined cancel is final.
 */
function batchTerms(request: BatchSettleRequest): SettlementTerms {
  const action = request.action;
  switch (action.type) {
    case 'deposit': {
      const auth = action.deposit.authorization;
      const payer = getAddress(action.channelConfig.payer.toLowerCase());
      return {
        payer,
        payTo: ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        amount: BigInt(action.deposit.amount),
        validBefore: 'erc3009Authorization' in auth ? BigInt(auth.erc3009Authorization.validBefore) : 0n,
      };
    }
    case 'claim': {
      const receiver = getAddress(action.claims[0]!.voucher.channel.receiver.toLowerCase());
      return { payer: receiver, payTo: receiver, amount: 0n, validBefore: 0n };
    }
    case 'settle': {
      const receiver = getAddress(action.receiver.toLowerCase());
      return { payer: receiver, payTo: receiver, amount: 0n, validBefore: 0n };
    }
    case 'refund': {
      const payer = getAddress(action.channelConfig.payer.toLowerCase());
      return { payer, payTo: payer, amount: BigInt(request.resolved?.refundAmount ?? 0), validBefore: 0n };
    }
  }
}

export function settlementTerms(request: SettlementRequest): SettlementTerms {
  if (isBatchRequest(request)) return batchTerms(request);
  if (isUptoRequest(request)) {
    const a = request.payment.payload.permit2Authorization;
    return {
      payer: getAddress(a.from.toLowerCase()),
      payTo: a.witness.to,
      amount: BigInt(request.charge),
      validBefore: BigInt(a.deadline) + 1n,
    };
  }
  const a = request.paymentPayload.payload.authorization;
  return {
    // Lowercased first: a mixed-case address with a bad checksum must not throw here (the
    // signature check, which does not care about case, already passed in the handler).
    payer: getAddress(a.from.toLowerCase()),
    payTo: a.to,
    amount: BigInt(a.value),
    validBefore: BigInt(a.validBefore),
  };
}

/**
 * Whether the request draws on the account's own failed-gas budget rather than its payers'
 * (docs/SETTLEMENT.md, "Failed-gas budget"): a batch-settlement settle, and a claim whose every
 * voucher the contract checks against a payer authorizer's key (ECDSA), which no payer's
 * signature or funds can make revert, and which must go on chain before a payer's timed
 * withdrawal can take what it was charged. A claim row without a payer authorizer is checked
 * against the payer itself, whose contract wallet (or EIP-7702 delegate) may answer otherwise
 * when mined than when simulated: that claim draws on the payers' budget, as everything a payer
 * signs does (an exact or upto transfer, a deposit, a refund it asked for).
 */
export function drawsOwnGasBudget(request: SettlementRequest): boolean {
  if (!isBatchRequest(request)) return false;
  const action = request.action;
  if (action.type === 'settle') return true;
  return action.type === 'claim' && action.claims.every((row) => BigInt(row.voucher.channel.payerAuthorizer) !== 0n);
}

/** The payer the request names, as sent (a batch-settlement claim's or settle's: its receiver). */
export function payerNamed(request: SettlementRequest): string {
  if (isBatchRequest(request)) return batchTerms(request).payer;
  return isUptoRequest(request)
    ? request.payment.payload.permit2Authorization.from
    : request.paymentPayload.payload.authorization.from;
}

/**
 * Whether a verified request of `amount` settles without a transaction: an upto charge of 0, a
 * batch-settlement claim whose totals the chain already holds (claims are cumulative).
 */
export function settlesWithoutTransaction(request: SettlementRequest, amount: bigint): boolean {
  if (amount !== 0n) return false;
  return isUptoRequest(request) || (isBatchRequest(request) && request.action.type === 'claim');
}

/**
 * The account kind (network, asset) the request settles, as the guardrails read it. An upto
 * or batch-settlement request may name the deployment's network in CAIP-2 (x402 v2): its kind
 * is named as the deployment names it (`deploymentNetwork`), as accounts' allowed kinds are.
 */
export function settlementKind(
  request: SettlementRequest,
  deploymentNetwork: string,
): { network: string; asset: string } {
  return isUptoRequest(request) || isBatchRequest(request)
    ? { network: deploymentNetwork, asset: request.asset }
    : { network: request.paymentRequirements.network, asset: request.paymentRequirements.asset };
}

/**
 * Whether two requests of one authorization ask the same settlement: the same scheme, network,
 * asset, payee and amount (an exact request's maximum, an upto request's charge; a
 * batch-settlement request's action). A duplicate asking otherwise is not that settlement's: for
 * upto, the first charge wins.
 */
export function sameSettlement(a: SettlementRequest, b: SettlementRequest): boolean {
  if (isBatchRequest(a) || isBatchRequest(b)) {
    if (!isBatchRequest(a) || !isBatchRequest(b)) return false;
    // Stored requests come back from jsonb with their keys reordered: compared by value.
    return (
      a.network === b.network &&
      a.asset.toLowerCase() === b.asset.toLowerCase() &&
      isDeepStrictEqual(a.action, b.action)
    );
  }
  if (isUptoRequest(a) || isUptoRequest(b)) {
    if (!isUptoRequest(a) || !isUptoRequest(b)) return false;
    return (
      a.network === b.network &&
      a.asset.toLowerCase() === b.asset.toLowerCase() &&
      a.payTo.toLowerCase() === b.payTo.toLowerCase() &&
      BigInt(a.charge) === BigInt(b.charge)
    );
  }
  const x = a.paymentRequirements;
  const y = b.paymentRequirements;
  return (
    x.scheme === y.scheme &&
    x.network === y.network &&
    x.asset.toLowerCase() === y.asset.toLowerCase() &&
    x.payTo.toLowerCase() === y.payTo.toLowerCase() &&
    BigInt(x.maxAmountRequired) === BigInt(y.maxAmountRequired)
  );
}
