// Payment stage (after policy, before forwarding), the v1 contract (docs/API.md "x402 payments"):
// - priced agent, no payment header: 402 with the x402 v1 challenge in the body and the v2 one
//   in PAYMENT-REQUIRED; nothing recorded or forwarded;
// - X-PAYMENT (v1) or PAYMENT-SIGNATURE (v2, dialect.ts): decoded and verified here (the
//   gateway holds no key; it only checks the payer's EIP-712 signature and the terms), recorded
//   in PostgreSQL, then, when the tenant has settlement configured, settled through its
//   facilitator before the upstream is called. Both dialects take the same path from the
//   decoded v1 Payment on; only the receipt header differs.
// - a v2 PaymentPayload in an MCP request's `params._meta["x402/payment"]` (the x402 MCP
//   transport, api/proxy/mcp.ts) takes the v2 path; a payment identifier (identifier.ts) gives
//   a retry the first attempt's outcome.
// Every failure is a 402 with a coarse `{error}` (and PAYMENT-REQUIRED); the precise cause is
// only logged. A call whose route chose the MCP answer style gets it as a JSON-RPC tool result.
import type { EntityManager } from '@mikro-orm/postgresql';
import { getAddress } from 'ethers';
import { ApiError } from '../errors.ts';
import type { PaymentRecord, ProxyCall } from '../proxy/call.ts';
import type { AppDeps } from '../deps.ts';
import { verifyGatePayment, type GateVerifyResult } from './verify.ts';
import { loadSettlementClientTls } from '../../gateway/settlement/tls.ts';
import { settlements } from '../../gateway/metrics.ts';
import { challengeFor, requirementsFor } from './requirements.ts';
import {
  PaymentAlreadyBound,
  recordPayment,
  recordSettlement,
  resumableUnboundPayment,
  type PaymentKey,
} from '../../gateway/payment/binding.ts';
import type { ChallengeEntry, Payment } from '../../x402/schemas.ts';
import { createFacilitatorClient, type FacilitatorClient } from './facilitator-client.ts';
import {
  decodeOffer,
  bodyPaymentOf,
  offeredPayment,
  paymentRequiredHeader,
  paymentResponseValue,
  settleResponseV2,
  type Dialect,
  type PaymentHeaders,
} from './dialect.ts';
import { inAnswerStyle } from '../proxy/mcp.ts';
import { discoveryExtensionsOf } from '../discovery/bazaar.ts';
import { answerKnownIdentifier, identifierConflict, identifiesBoundPayment } from './identifier.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';

/** Retry-After of a 503 whose payment is still settling: a settle answers within seconds. */
const SETTLING_RETRY_AFTER_S = 3;

/** The payment stage's long-lived parts: its configuration and the facilitator client (one set of keep-alive pools per app). */
export type PaymentGate = { config: PaymentConfig; client: FacilitatorClient };

/** The answer whose only advice is to resend the same payment header (docs/SETTLEMENT.md, the payer's promise). */
export function stillSettling(): ApiError {
  return new ApiError(503, 'payment is still settling; retry with the same payment header', {
    'Retry-After': String(SETTLING_RETRY_AFTER_S),
  });
}

export function createPaymentGate(deps: AppDeps): PaymentGate {
  const config = deps.config.payment;
  return {
    config,
    client: createFacilitatorClient({
      caPem: config.settlementCaPem,
      timeoutMs: config.settlementTimeoutMs,
      allow: deps.config.upstream.allow,
    }),
  };
}

/** The 402 of a call offering no payment: the v1 challenge in the body, the v2 one in PAYMENT-REQUIRED. */
export function challengeError(
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'resourceUrl'>,
): ApiError {
  const v1 = challengeFor(config, call, 'X-PAYMENT header is required');
  return new ApiError(
    402,
    'payment required',
    paymentRequiredHeader(
      config,
      requirementsFor(config, call),
      'PAYMENT-SIGNATURE header is required',
      discoveryExtensionsOf(call),
    ),
    v1,
  );
}

/**
 * The offered payment, decoded and verified against this call's terms; null when the call costs
 * nothing. Throws the challenge when none is offered and the coarse 402 when it does not verify.
 */
async function verifiedOffer(
  deps: AppDeps,
  gate: PaymentGate,
  call: Pick<ProxyCall, 'agent' | 'mcp' | 'a2a' | 'resourceUrl' | 'requestId' | 'caller' | 'paymentAnswer'>,
  headers: PaymentHeaders,
  resume = true,
) {
  if (!call.agent.pricing) return null;
  const { config } = gate;
  const requirements = requirementsFor(config, call);
  // A tool priced at 0 is free: nothing to pay, nothing to verify.
  if (BigInt(requirements.maxAmountRequired) === 0n) return null;
  const paymentError = (message: string) =>
    inAnswerStyle(
      config,
      call,
      requirements,
      new ApiError(402, message, paymentRequiredHeader(config, requirements, message, discoveryExtensionsOf(call))),
    );
  const offer = offeredPayment({ ...headers, ...bodyPaymentOf(call) });
  if (offer === 'none') throw inAnswerStyle(config, call, requirements, challengeError(config, call));
  if (offer === 'both') {
    deps.log.info(
      { requestId: call.requestId, agentId: call.agent.id, cause: 'two_payment_headers' },
      'payment refused',
    );
    throw paymentError('invalid payment');
  }
  const { dialect } = offer;

  const decoded = decodeOffer(config, offer, requirements);
  if (!decoded) throw paymentError('invalid payment');
  const { payment, paymentId } = decoded;
  let verified = await verifyGatePayment(config, payment, requirements);
  // The precheck asks no database: an expired payment may still resume at the stage.
  if (!verified.ok && verified.cause === 'expired' && !resume) return null;
  if (!verified.ok && verified.cause === 'expired') {
    // Recorded earlier for this call and settled (or its outcome unknown), then not accepted (a
    // crash, an outage), or already answered under this payment identifier: the payment is looked
    // up before the window decides, so the same payment resumes it, bound without settling again
    // or settled again (the facilitator dedupes), or gets its first answer back.
    verified = (await resumableVerification(deps, config, call, payment, requirements, paymentId)) ?? verified;
  }
  if (!verified.ok) {
    deps.log.info({ requestId: call.requestId, agentId: call.agent.id, cause: verified.cause }, 'payment refused');
    throw paymentError('invalid payment');
  }
  return { dialect, payment, paymentId, verified, requirements, paymentError };
}

/**
 * The checksummed address of the payer of this call's offered payment, verified against the
 * call's terms, and the authorization's nonce (which, with the payer, names the payment); null
 * when the call costs nothing. A public call's caller (api/proxy/public-door.ts),
 * known before policy; the payment stage then verifies it again, records and settles it.
 */
export async function payerOf(
  deps: AppDeps,
  gate: PaymentGate,
  call: ProxyCall,
  headers: PaymentHeaders,
): Promise<{ payer: string; nonce: string } | null> {
  const offer = await verifiedOffer(deps, gate, call, headers);
  return offer ? { payer: getAddress(offer.verified.payment.payer), nonce: offer.verified.payment.nonce } : null;
}

/**
 * A public call's header payment, before its rate-limit tokens are taken or its body read, when
 * its price does not depend on the body: decoded and checked against the terms and its signature
 * (no database), so a made-up payment costs the tenant's buckets and body budget nothing. Throws
 * the stage's 402; the stage verifies it again, records and settles it.
 */
export async function precheckOffer(
  deps: AppDeps,
  gate: PaymentGate,
  call: Pick<ProxyCall, 'agent' | 'resourceUrl' | 'requestId' | 'caller'>,
  headers: PaymentHeaders,
): Promise<void> {
  await verifiedOffer(deps, gate, { ...call, mcp: null }, headers, false);
}

export async function paymentStage(
  deps: AppDeps,
  gate: PaymentGate,
  call: ProxyCall,
  headers: PaymentHeaders,
): Promise<PaymentRecord | null> {
  const offer = await verifiedOffer(deps, gate, call, headers);
  if (!offer) return null;
  const { config, client } = gate;
  const { dialect, payment, paymentId, verified, requirements, paymentError } = offer;

  const key: PaymentKey = {
    network: config.network,
    asset: requirements.asset,
    payer: verified.payment.payer,
    nonce: verified.payment.nonce,
  };
  const amount = requirements.maxAmountRequired;
  const em: EntityManager = deps.orm.em.fork() as EntityManager;
  const scope = { tenantId: call.caller.tenantId, agentId: call.agent.id };
  if (paymentId)
    await answerKnownIdentifier(em, config, { ...scope, payer: key.payer, nonce: key.nonce, paymentId, dialect });
  const recording = await recordPayment(em, { ...key, ...scope, amount, paymentId });
  if (recording.state === 'conflict') throw identifierConflict();
  if (recording.state === 'used') throw paymentError('payment already used');
  // Settled for a call whose workflow never started (its binding was released): the money is
  // already collected, so this call is the one it buys; nothing is settled again.
  const settled = (transaction: string, network?: string, payer?: string) => ({
    ...settledPayment(config, dialect, key, amount, transaction, network, payer),
    paymentId,
  });
  if (recording.settledTransaction) return settled(recording.settledTransaction);

  let target;
  try {
    target = await loadSettlementClientTls(deps, call.caller.tenantId);
  } catch {
    throw paymentError('settlement_unavailable');
  }
  // Without settlement configured the payment is verified and recorded only.
  if (!target)
    return { ...key, amount, transaction: null, dialect, responseHeader: null, metaResponse: null, paymentId };

  // The facilitator speaks v1 only: a v2 payment is settled as the v1 Payment it was reduced to.
  const outcome = await client.settle(target, {
    x402Version: 1,
    paymentPayload: payment,
    paymentRequirements: requirements,
  });
  settlements.inc({ service: 'gateway', outcome: outcome.ok ? 'settled' : outcome.error });
  // A refusal of this request says nothing of an earlier one for the same payment whose answer
  // never came: that transfer may still land, so it is not a 402 either.
  if (
    !outcome.ok &&
    (outcome.error === 'settlement_unavailable' || (outcome.error === 'settlement_refused' && recording.outcomeUnknown))
  ) {
    // Not known either way (no answer in time, a dropped connection, the facilitator busy with
    // the same authorization): the transfer may still land. A 402 would make an x402 client
    // sign a second authorization, so the payer is told to retry with the same header, which
    // resumes this payment (the facilitator dedupes by nonce).
    deps.log.info(
      { requestId: call.requestId, agentId: call.agent.id, outcome: outcome.error },
      'payment outcome not known yet',
    );
    throw stillSettling();
  }
  if (!outcome.ok) {
    await recordSettlement(em, key, 'unsettled', null);
    deps.log.info({ requestId: call.requestId, agentId: call.agent.id, outcome: outcome.error }, 'payment not settled');
    throw paymentError(outcome.error);
  }
  await recordSettlement(em, key, 'settled', outcome.transaction);
  return settled(outcome.transaction, outcome.network, outcome.payer);
}

/**
 * The payment verified at a moment inside its window, when this call holds an unbound record of
 * it within X402_SETTLED_RESUME_HOURS that is settled or whose outcome is unknown; null otherwise.
 */
async function resumableVerification(
  deps: AppDeps,
  config: PaymentConfig,
  call: Pick<ProxyCall, 'agent' | 'caller'>,
  payment: Payment,
  requirements: ChallengeEntry,
  paymentId: string | null,
): Promise<GateVerifyResult | null> {
  const a = payment.payload.authorization;
  const inside = Number(BigInt(a.validBefore) - BigInt(config.validityMarginSeconds) - 1n);
  if (!Number.isSafeInteger(inside)) return null;
  const verified = await verifyGatePayment(config, payment, requirements, inside);
  if (!verified.ok) return null;
  const key: PaymentKey = {
    network: config.network,
    asset: requirements.asset,
    payer: verified.payment.payer,
    nonce: verified.payment.nonce,
  };
  const input = {
    ...key,
    tenantId: call.caller.tenantId,
    agentId: call.agent.id,
    amount: requirements.maxAmountRequired,
  };
  const em = deps.orm.em.fork() as EntityManager;
  if (await resumableUnboundPayment(em, input, config.settledResumeMs)) return verified;
  const answered = paymentId && (await identifiesBoundPayment(em, config, { ...input, paymentId }));
  return answered ? verified : null;
}

function settledPayment(
  config: PaymentConfig,
  dialect: Dialect,
  key: PaymentKey,
  amount: string,
  transaction: string,
  network = key.network,
  payer = key.payer,
): PaymentRecord {
  return {
    ...key,
    amount,
    transaction,
    dialect,
    responseHeader: paymentResponseValue(config, dialect, { transaction, network, payer }),
    metaResponse: dialect === 'mcp' ? settleResponseV2(config, { transaction, payer }) : null,
  };
}

/**
 * A refusal raised after this stage (the payment bound meanwhile by a concurrent request with
 * the same authorization: PaymentAlreadyBound) is a 402 carrying the call's PAYMENT-REQUIRED
 * like the stage's own 402s.
 */
export function withPaymentRequired(deps: AppDeps, call: ProxyCall, err: unknown): unknown {
  if (err instanceof PaymentAlreadyBound) err = new ApiError(402, err.message);
  if (!(err instanceof ApiError) || err.status !== 402 || !call.agent.pricing) return err;
  // A concurrent resend under the same payment identifier bound it first: that call's answer is
  // the one this payer gets back, on its next resend (identifier.ts), so not a 402 now.
  if (call.payment?.paymentId) return stillSettling();
  const config = deps.config.payment;
  const requirements = requirementsFor(config, call);
  return inAnswerStyle(
    config,
    call,
    requirements,
    new ApiError(
      402,
      err.message,
      { ...err.headers, ...paymentRequiredHeader(config, requirements, err.message, discoveryExtensionsOf(call)) },
      err.body,
    ),
  );
}
