// The payment flow of a call (after policy, before forwarding), the v1 contract's (docs/API.md
// "x402 payments"):
// - a charged call offering no payment: PaymentRequired with the challenge entries of its price
//   (one per scheme, schemes/); nothing recorded or forwarded;
// - a payment in X-PAYMENT (v1), PAYMENT-SIGNATURE (v2) or the JSON-RPC body (the x402 MCP and
//   A2A transports; dialect.ts): decoded, verified by the scheme of the entry it pays (the
//   gateway holds no key; it only checks the payer's signature and the terms), recorded in
//   PostgreSQL (binding.ts), then, when the tenant has settlement configured, settled through its
//   facilitator (facilitator-client.ts) before the upstream is called. Every dialect takes the
//   same path from the decoded v1 Payment on; only the receipt differs. A payment identifier
//   (identifier.ts) gives a retry the first attempt's outcome.
// Every refusal is a PaymentRefused with a coarse reason (refusals.ts); the precise cause is only
// logged. Not knowing whether a transfer lands is PaymentStillSettling, never a refusal.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import type { Logger } from '../../lib/log.ts';
import { encodeBase64Json, type ChallengeEntry, type Payment } from '../../x402/schemas.ts';
import type { SettleResponseV2 } from '../../x402/v2.ts';
import type { VaultConfig } from '../credentials/config.ts';
import type { VaultClient } from '../credentials/vault.ts';
import { loadSettlementClientTls } from '../settlement/tls.ts';
import { settlements } from '../metrics.ts';
import { recordPayment, recordSettlement, resumableUnboundPayment, type PaymentKey } from './binding.ts';
import type { PaymentConfig } from './config.ts';
import {
  bodyPaymentOf,
  decodeOffer,
  offeredPayment,
  paymentResponseValue,
  settleResponseV2,
  type Dialect,
  type PaymentHeaders,
} from './dialect.ts';
import { createFacilitatorClient, type FacilitatorClient } from './facilitator-client.ts';
import { answerKnownChannelIdentifier, answerKnownIdentifier, identifiesBoundPayment } from './identifier.ts';
import { isCharged, type Price } from './pricing.ts';
import { PaymentIdentifierConflict, PaymentRefused, PaymentRequired, PaymentStillSettling } from './refusals.ts';
import { challengeEntries, gatewayScheme } from './schemes/index.ts';
import { admitChannelPayment, type AdmittedChannel } from './channels/admission.ts';
import { createChannelOwners, type ChannelOwners } from './channels/owners.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { createSupportedKinds, type SupportedKind, type SupportedKinds } from './supported.ts';
import { createFacilitatorTargets, type FacilitatorTargets } from './targets.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import type { GatewayScheme, GateVerifyResult } from './schemes/scheme.ts';

/** A call's verified (and, when configured, settled) payment, as its row and receipt take it. */
export type PaymentRecord = {
  network: string;
  asset: string;
  amount: string;
  payer: string;
  nonce: string;
  transaction: string | null;
  /** The x402 dialect the caller paid in: it names the receipt header (dialect.ts). */
  dialect: Dialect;
  /** base64 JSON for the receipt header (X-PAYMENT-RESPONSE or PAYMENT-RESPONSE), set after a successful settle. */
  responseHeader: string | null;
  /**
   * The SettleResponse of a payment made in the JSON-RPC body (dialect `mcp`): for an MCP result's
   * `_meta["x402/payment-response"]` (gateway/mcp/x402.ts) or an A2A answer's
   * `x402.payment.receipts` (gateway/a2a/x402.ts).
   */
  metaResponse: SettleResponseV2 | null;
  /** The payer's payment identifier (payment-identifier extension), when it sent one. */
  paymentId?: string | null;
  /**
   * The challenge entries the payment was verified against: what a refusal after the flow (the
   * payment bound meanwhile by a concurrent request) offers again, without reading the
   * facilitator's kinds a second time.
   */
  offered: ChallengeEntry[];
  /**
   * A payment charged after its call: the moment (unix seconds) by which its charge must reach
   * the facilitator, its authorization still valid then. A metered stream is ended before it.
   */
  chargeBy?: number | null;
  /** batch-settlement: the channel the call is paid from, held until its charge is committed. */
  channel?: AdmittedChannel;
};

/** The flow's long-lived parts: its configuration and the facilitator client (one set of keep-alive pools per app). */
export type PaymentGate = {
  config: PaymentConfig;
  client: FacilitatorClient;
  /** The kinds of each tenant facilitator, read once every few minutes (supported.ts). */
  supported: SupportedKinds<Parameters<FacilitatorClient['supported']>[0]>;
  /** Each tenant's facilitator target for reading those kinds, kept briefly (targets.ts). */
  targets: FacilitatorTargets;
  /** The payment channels this process holds between calls (channels/owners.ts); none when it holds none. */
  owners: ChannelOwners | null;
};

/** What the flow reads and writes with: the database, the log, and what a tenant's facilitator credential is read with. */
export type PaymentDeps = {
  orm: MikroORM;
  log: Logger;
  config: { vault: VaultConfig };
  vaultClient: VaultClient;
};

/** The facts of a call the flow needs: its price (api/proxy/call.ts), who calls which agent, and any payment in its body. */
export type PaymentCall = {
  price: Price | null;
  resourceUrl: string;
  requestId: string;
  agent: { id: string };
  caller: { tenantId: string };
  mcp: { payment?: unknown; forwardBody?: Buffer } | null;
  a2a?: { x402?: { paid: boolean; payload: unknown } | null } | null;
  /**
   * `streaming`: the call's row is written with its payment as it is forwarded, and answered
   * only once that is written (api/invoke/stream-record.ts): a voucher may be admitted on a
   * channel this process holds between calls (channels/owners.ts).
   */
  mode?: 'transactional' | 'streaming';
};

export function createPaymentGate(
  config: PaymentConfig,
  allow: string[],
  feed: ChangeFeed,
  orm: MikroORM,
  log: Logger,
): PaymentGate {
  const client = createFacilitatorClient({
    caPem: config.settlementCaPem,
    timeoutMs: config.settlementTimeoutMs,
    allow,
  });
  return {
    config,
    client,
    supported: createSupportedKinds((target) => client.supported(target)),
    targets: createFacilitatorTargets(feed),
    owners:
      config.channelHoldIdleMs > 0 ? createChannelOwners(orm, log, feed, { idleMs: config.channelHoldIdleMs }) : null,
  };
}

/**
 * Payments of a scheme whose verdict lasts, verified whole (their signature too) in the last few
 * seconds, by their header and terms: long enough for one call's stages to verify it once.
 */
const verifiedLately = new LRUCache<string, GateVerifyResult & { ok: true }>({ max: 1_000, ttl: 10_000 });

/** An offered payment, verified against the terms of the entry it pays. */
type VerifiedOffer = {
  dialect: Dialect;
  payment: Payment;
  paymentId: string | null;
  verified: Extract<GateVerifyResult, { ok: true }>;
  requirements: ChallengeEntry;
  entries: ChallengeEntry[];
  /** The scheme the payment was verified by. */
  scheme: GatewayScheme;
};

/**
 * The kinds of the tenant's facilitator when the price's scheme names something only it says
 * (upto's facilitator address); null otherwise, or when there is none to read (the scheme then
 * cannot be offered: challengeEntries fails closed).
 */
export async function facilitatorKinds(
  deps: PaymentDeps,
  gate: PaymentGate,
  tenantId: string,
  price: Price | null,
): Promise<readonly SupportedKind[] | null> {
  if (!price || !gatewayScheme(price.scheme)?.readsFacilitator) return null;
  const target = await gate.targets.of(deps, tenantId).catch(() => null);
  return target ? gate.supported.of(target) : null;
}

/** What an unpaid call is offered for: its price, its resource and whose facilitator settles it. */
export type OfferedCall = { price: Price; resourceUrl: string; caller: { tenantId: string } };

/**
 * The challenge entries of a call at this price, with the tenant facilitator's kinds when its
 * scheme needs them: what every 402 offers (this flow's, a public agent's unpaid request, the A2A
 * transport's payment task). Throws PaymentUnavailable when the scheme's entry cannot be offered now.
 */
export async function offeredEntries(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: OfferedCall,
): Promise<ChallengeEntry[]> {
  const kinds = await facilitatorKinds(deps, gate, call.caller.tenantId, call.price);
  return challengeEntries(gate.config, call.price, call.resourceUrl, kinds);
}

/**
 * The offered payment, decoded and verified against this call's terms; null when the call costs
 * nothing (or, `resume` off, when its payment expired: it may still resume at the flow).
 * Throws PaymentRequired when none is offered and PaymentRefused when it does not verify.
 */
async function verifiedOffer(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: PaymentCall,
  headers: PaymentHeaders,
  resume = true,
  /** The payer's signature may be left to `verified.signed` (a scheme's verifyTerms). */
  signatureLater = false,
): Promise<VerifiedOffer | null> {
  // A tool priced at 0 is free: nothing to pay, nothing to verify.
  if (!isCharged(call.price)) return null;
  const { config } = gate;
  const entries = await offeredEntries(deps, gate, { ...call, price: call.price });
  const offer = offeredPayment({ ...headers, ...bodyPaymentOf(call) });
  if (offer === 'none') throw new PaymentRequired(entries);
  if (offer === 'both') {
    deps.log.info(
      { requestId: call.requestId, agentId: call.agent.id, cause: 'two_payment_headers' },
      'payment refused',
    );
    throw new PaymentRefused('invalid payment', entries);
  }
  const { dialect } = offer;

  const decoded = decodeOffer(config, offer, entries);
  if (!decoded) throw new PaymentRefused('invalid payment', entries);
  const { payment, paymentId, requirements, scheme } = decoded;
  // The same header verified whole moments ago against the same terms (a public call's precheck,
  // then its payer, then its payment): its verdict, with no second signature recovery.
  const memo = scheme.verdictLasts && 'header' in offer ? `${offer.header}\n${JSON.stringify(requirements)}` : null;
  const remembered = memo ? verifiedLately.get(memo) : undefined;
  // Not with a payment identifier: the identifier's earlier answer is given before the admission.
  let verified: GateVerifyResult =
    remembered ??
    (signatureLater && !paymentId && scheme.verifyTerms
      ? await scheme.verifyTerms(config, payment, requirements)
      : await scheme.verify(config, payment, requirements));
  if (memo && verified.ok && !verified.signed) verifiedLately.set(memo, verified);
  // The precheck asks no database: an expired payment may still resume at the flow.
  if (!verified.ok && verified.cause === 'expired' && !resume) return null;
  if (!verified.ok && verified.cause === 'expired') {
    // Recorded earlier for this call and settled (or its outcome unknown), then not accepted (a
    // crash, an outage), or already answered under this payment identifier: the payment is looked
    // up before the window decides, so the same payment resumes it, bound without settling again
    // or settled again (the facilitator dedupes), or gets its first answer back.
    verified = (await resumableVerification(deps, gate, call, scheme, payment, requirements, paymentId)) ?? verified;
  }
  if (!verified.ok) {
    deps.log.info({ requestId: call.requestId, agentId: call.agent.id, cause: verified.cause }, 'payment refused');
    throw new PaymentRefused('invalid payment', entries);
  }
  return { dialect, payment, paymentId, verified, requirements, entries, scheme };
}

/**
 * The payer of this call's offered payment (checksummed), verified against the call's terms, and
 * the nonce (which, with the payer, names the payment); null when the call costs nothing. A
 * public call's caller (api/admission/public-door.ts), known before policy; the flow then verifies it
 * again, records and settles it.
 */
export async function payerOf(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: PaymentCall,
  headers: PaymentHeaders,
): Promise<{ payer: string; nonce: string } | null> {
  const offer = await verifiedOffer(deps, gate, call, headers);
  return offer ? { payer: offer.verified.payer, nonce: offer.verified.nonce } : null;
}

/**
 * A public call's header payment, before its rate-limit tokens are taken or its body read, when
 * its price does not depend on the body: decoded and checked against the terms and its signature
 * (no database), so a made-up payment costs the tenant's buckets and body budget nothing. Throws
 * what the flow throws; the flow verifies it again, records and settles it.
 */
export async function precheckOffer(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: Omit<PaymentCall, 'mcp' | 'a2a'>,
  headers: PaymentHeaders,
): Promise<void> {
  await verifiedOffer(deps, gate, { ...call, mcp: null }, headers, false);
}

/**
 * Verifies, records and (when the tenant has settlement configured) settles the call's payment:
 * its record, or null when the call costs nothing. Throws refusals.ts's outcomes.
 */
export async function payForCall(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: PaymentCall,
  headers: PaymentHeaders,
): Promise<PaymentRecord | null> {
  // A voucher's signature may be checked as its call's first write goes (channels/admission.ts).
  const offer = await verifiedOffer(deps, gate, call, headers, true, call.mode === 'streaming');
  if (!offer) return null;
  if (offer.scheme.protocol.name === SCHEME_BATCH_SETTLEMENT) return payFromChannel(deps, gate, call, offer);
  if (offer.verified.signed && !(await offer.verified.signed()))
    throw new PaymentRefused('invalid payment', offer.entries);
  const { config, client } = gate;
  const { dialect, payment, paymentId, verified, requirements, entries } = offer;

  const key: PaymentKey = {
    network: config.network,
    asset: requirements.asset,
    payer: verified.payer,
    nonce: verified.nonce,
  };
  const amount = requirements.maxAmountRequired;
  const em: EntityManager = deps.orm.em.fork() as EntityManager;
  const scope = { tenantId: call.caller.tenantId, agentId: call.agent.id };
  if (paymentId)
    await answerKnownIdentifier(em, config, { ...scope, payer: key.payer, nonce: key.nonce, paymentId, dialect });
  // A payment charged after its call keeps its signature until then (charges.ts).
  const signedPayment = offer.scheme.settlesAfterCall ? { payment, requirements } : null;
  const recording = await recordPayment(em, { ...key, ...scope, amount, paymentId, signedPayment });
  if (recording.state === 'conflict') throw new PaymentIdentifierConflict();
  if (recording.state === 'used') {
    // Bound by a concurrent request under the same identifier after this one looked it up: that
    // call's answer is this payer's (PaymentAlreadyAnswered). Under another identifier, or none,
    // the payment is used.
    if (paymentId)
      await answerKnownIdentifier(em, config, { ...scope, payer: key.payer, nonce: key.nonce, paymentId, dialect });
    throw new PaymentRefused('payment already used', entries);
  }
  // Settled for a call whose workflow never started (its binding was released): the money is
  // already collected, so this call is the one it buys; nothing is settled again.
  const settled = (transaction: string, network?: string, payer?: string) => ({
    ...settledPayment(config, dialect, key, amount, transaction, network, payer),
    paymentId,
    offered: entries,
  });
  const unsettled = (): PaymentRecord => ({
    ...key,
    amount,
    transaction: null,
    dialect,
    responseHeader: null,
    metaResponse: null,
    paymentId,
    offered: entries,
  });
  if (recording.settledTransaction) return settled(recording.settledTransaction);

  // A metered scheme's payment buys the call now and is charged once the answer is complete,
  // which must be before its authorization expires (chargeBy).
  if (offer.scheme.settlesAfterCall) return { ...unsettled(), chargeBy: offer.scheme.momentInside(config, payment) };

  let target;
  try {
    target = await loadSettlementClientTls(deps, call.caller.tenantId);
  } catch {
    throw new PaymentRefused('settlement_unavailable', entries);
  }
  // Without settlement configured the payment is verified and recorded only.
  if (!target) return unsettled();

  // The facilitator speaks v1 only: a v2 payment is settled as the v1 Payment it was reduced to.
  const outcome = await client.settle(target, {
    x402Version: 1,
    paymentPayload: payment,
    paymentRequirements: requirements,
  });
  settlements.inc({ service: 'gateway', outcome: outcome.ok ? 'settled' : outcome.error });
  // A refusal of this request says nothing of an earlier one for the same payment whose answer
  // never came: that transfer may still land, so it is not a refusal either.
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
    throw new PaymentStillSettling();
  }
  if (!outcome.ok) {
    await recordSettlement(em, key, 'unsettled', null);
    deps.log.info({ requestId: call.requestId, agentId: call.agent.id, outcome: outcome.error }, 'payment not settled');
    throw new PaymentRefused(outcome.error, entries);
  }
  await recordSettlement(em, key, 'settled', outcome.transaction);
  return settled(outcome.transaction, outcome.network, outcome.payer);
}

/** A batch-settlement payment: admitted on its channel (channels/admission.ts), its charge committed after the call. */
async function payFromChannel(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: PaymentCall,
  offer: VerifiedOffer,
): Promise<PaymentRecord> {
  const { config } = gate;
  // A resend under the payment identifier of a call already paid gets that call's answer.
  if (offer.paymentId)
    await answerKnownChannelIdentifier(deps.orm.em.fork() as EntityManager, config, {
      tenantId: call.caller.tenantId,
      agentId: call.agent.id,
      payer: offer.verified.payer,
      nonce: offer.verified.nonce,
      paymentId: offer.paymentId,
      dialect: offer.dialect,
    });
  const admitted = await admitChannelPayment(
    deps,
    gate,
    {
      tenantId: call.caller.tenantId,
      agentId: call.agent.id,
      requestId: call.requestId,
      recordsAsItForwards: call.mode === 'streaming',
    },
    { ...offer, payer: offer.verified.payer, nonce: offer.verified.nonce, signed: offer.verified.signed ?? null },
  );
  return {
    network: config.network,
    asset: offer.requirements.asset,
    amount: offer.requirements.maxAmountRequired,
    payer: offer.verified.payer,
    nonce: admitted.nonce,
    transaction: admitted.transaction,
    dialect: offer.dialect,
    responseHeader: offer.dialect === 'v1' ? null : encodeBase64Json(admitted.receipt),
    // In the JSON-RPC answer too: an MCP or A2A client keeps its channel's state from it.
    metaResponse: offer.dialect === 'mcp' ? admitted.receipt : null,
    paymentId: offer.paymentId,
    offered: offer.entries,
    channel: admitted.channel,
  };
}

/**
 * The payment verified at a moment inside its window, when this call holds an unbound record of
 * it within X402_SETTLED_RESUME_HOURS that is settled or whose outcome is unknown; null otherwise.
 */
async function resumableVerification(
  deps: PaymentDeps,
  gate: PaymentGate,
  call: PaymentCall,
  scheme: GatewayScheme,
  payment: Payment,
  requirements: ChallengeEntry,
  paymentId: string | null,
): Promise<GateVerifyResult | null> {
  const { config } = gate;
  const inside = scheme.momentInside(config, payment);
  if (inside === null) return null;
  const verified = await scheme.verify(config, payment, requirements, inside);
  if (!verified.ok) return null;
  const key: PaymentKey = {
    network: config.network,
    asset: requirements.asset,
    payer: verified.payer,
    nonce: verified.nonce,
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
): Omit<PaymentRecord, 'offered'> {
  return {
    ...key,
    amount,
    transaction,
    dialect,
    responseHeader: paymentResponseValue(config, dialect, { transaction, network, payer }),
    metaResponse: dialect === 'mcp' ? settleResponseV2(config, { transaction, payer }) : null,
  };
}
