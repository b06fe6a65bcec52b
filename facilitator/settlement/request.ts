// The request a settlement settles, of either scheme: an `exact` settle request (an EIP-3009
// authorization, settled for its value) or an `upto` one (a Permit2 authorization of a maximum,
// settled for the charge the request names). What the steps, the stored request and the
// settlement's owner read of it, whatever its scheme.
import { getAddress } from 'ethers';
import type { ExactSettleRequest } from '../../x402/schemes/exact/schemas.ts';
import type { UptoSettleRequest } from '../../x402/schemes/upto/settle-request.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';

export type SettlementRequest = ExactSettleRequest | UptoSettleRequest;

/** An upto request carries its scheme at the top (an exact one carries its envelope there). */
export function isUptoRequest(request: SettlementRequest): request is UptoSettleRequest {
  return (request as { scheme?: unknown }).scheme === SCHEME_UPTO;
}

/**
 * What the settlement moves: from the payer to the payee, the amount (an exact authorization's
 * value, an upto request's charge), before `validBefore` (Unix seconds, exclusive: an upto
 * authorization's Permit2 deadline is inclusive, so one past it).
 */
export type SettlementTerms = { payer: string; payTo: string; amount: bigint; validBefore: bigint };

export function settlementTerms(request: SettlementRequest): SettlementTerms {
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

/** The payer the request names, as sent. */
export function payerNamed(request: SettlementRequest): string {
  return isUptoRequest(request)
    ? request.payment.payload.permit2Authorization.from
    : request.paymentPayload.payload.authorization.from;
}

/**
 * The account kind (network, asset) the request settles, as the guardrails read it. An upto
 * request may name the deployment's network in CAIP-2 (x402 v2): its kind is named as the
 * deployment names it (`deploymentNetwork`), as accounts' allowed kinds are.
 */
export function settlementKind(
  request: SettlementRequest,
  deploymentNetwork: string,
): { network: string; asset: string } {
  return isUptoRequest(request)
    ? { network: deploymentNetwork, asset: request.asset }
    : { network: request.paymentRequirements.network, asset: request.paymentRequirements.asset };
}

/**
 * Whether two requests of one authorization ask the same settlement: the same scheme, network,
 * asset, payee and amount (an exact request's maximum, an upto request's charge). A duplicate
 * asking otherwise is not that settlement's: for upto, the first charge wins.
 */
export function sameSettlement(a: SettlementRequest, b: SettlementRequest): boolean {
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
