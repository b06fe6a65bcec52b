// The gateway's client of a facilitator's POST /settle: undici over mutual TLS with the
// tenant's client certificate and key, a deadline per call, and one keep-alive connection
// pool per (facilitator, certificate) so a settle does not pay a TLS handshake each time.
// Every answer is reduced to a coarse outcome; nothing a facilitator says is passed through.
// Beside `settle` (an exact payment, as the flow sends it): `supported`, the facilitator's kinds
// (read through ./supported.ts's cache), and `settleCharge`, the charge of a verified `upto`
// payment, whose zero charge is a success without a transaction.
// The facilitator URL is a tenant's setting, so connections go through the proxy's SSRF
// connector: the host is resolved once, every address checked against the guard (the
// facilitator's own host is exempt only when UPSTREAM_ALLOW names it), and the socket goes to
// the checked address (a name that rebinds to an internal address is never reached).
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { LRUCache } from 'lru-cache';
import { Agent, request } from 'undici';
import { checkedConnector, type Resolver } from '../upstream/dispatcher.ts';
import { BlockedAddressError } from '../upstream/errors.ts';
import {
  SettleResponse,
  Uint256String,
  type ChallengeEntry,
  type OfferedPayment,
  type SettleRequest,
} from '../../x402/schemas.ts';
import { schemeProtocol } from '../../x402/schemes/index.ts';
import { SupportedAnswer, type SupportedKind } from './supported.ts';
import { traceClientCall } from '../../lib/observability/spans.ts';

type FacilitatorTarget = { facilitatorUrl: string; certPem: string; keyPem: string };

type SettleOutcome =
  | { ok: true; transaction: string; network: string; payer: string }
  /** settlement_failed: the facilitator answered, and the payment was not collected. */
  | { ok: false; error: 'settlement_failed' | 'settlement_refused' | 'settlement_unavailable' };

/** A channel's state in a facilitator's answer (the spec's `channelState`). */
const ChannelStateAnswer = z.object({
  balance: Uint256String,
  totalClaimed: Uint256String,
  withdrawRequestedAt: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  refundNonce: Uint256String,
});

// What is taken of an answer is checked: a channel state out of a uint256's range or malformed is
// not one (the caller reads the chain instead), an amount or transaction that is none is ''.
const ChannelSettleAnswer = z.object({
  success: z.boolean(),
  transaction: z.string().optional(),
  amount: z.string().optional(),
  errorReason: z.string().optional(),
  extra: z.looseObject({ channelState: z.unknown().optional() }).optional(),
});

type ChannelSettleOutcome =
  | {
      ok: true;
      transaction: string;
      amount: string;
      channelState: z.infer<typeof ChannelStateAnswer> | null;
    }
  | { ok: false; error: 'settlement_failed' | 'settlement_refused' | 'settlement_unavailable'; reason?: string };

/** The terms of a charge: the challenge entry the payment was verified against, and what is charged of it. */
type Charge = { requirements: ChallengeEntry; amount: bigint };

export interface FacilitatorClient {
  settle(target: FacilitatorTarget, body: SettleRequest): Promise<SettleOutcome>;
  /**
   * Charges `charge.amount` (at most the maximum it authorized) of a verified payment whose
   * scheme charges after the call (`upto`): a charge of 0 is a success whose transaction is ''.
   */
  settleCharge(target: FacilitatorTarget, payment: OfferedPayment, charge: Charge): Promise<SettleOutcome>;
  /**
   * A batch-settlement action (a channel's deposit or refund) as the x402 v2 /settle body the
   * facilitator takes; its answer's transaction, amount and the channel's state after it.
   * `timeoutMs`: a shorter deadline than the client's own (a call answered under a channel's lease).
   */
  settleChannel(target: FacilitatorTarget, body: unknown, timeoutMs?: number): Promise<ChannelSettleOutcome>;
  /** The kinds the facilitator settles (its /supported), or null when it could not be read. */
  supported(target: FacilitatorTarget): Promise<SupportedKind[] | null>;
  close(): Promise<void>;
}

// Connection pools by (facilitator, client certificate): a deployment has a few facilitators
// and one certificate per tenant, so 100 keeps every active pair's keep-alive connections while
// a tenant changing certificates again and again cannot grow the open sockets without bound.
const MAX_POOLS = 100;

/**
 * The most a facilitator's answer may hold (undici's maxResponseSize, on every request of the
 * pool): /settle and /supported answer a few hundred bytes, so a larger body is a fault, read no
 * further (the settle is then not known: `settlement_unavailable`; the kinds unread: null).
 */
export const MAX_FACILITATOR_ANSWER_BYTES = 64 * 1024;

/** Whether a request failed because the guard refused the facilitator's address (nothing was sent). */
function blockedByGuard(err: unknown): boolean {
  for (let e = err as { cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e instanceof BlockedAddressError) return true;
  }
  return false;
}

/**
 * The /settle body of a charge: the v1-style envelope (docs/SETTLEMENT.md, "The upto scheme"),
 * the charge as the requirements' `maxAmountRequired`, the extensions the payer sent with it.
 */
function chargeBody(payment: OfferedPayment, charge: Charge): SettleRequest {
  const { extensions, ...envelope } = payment;
  return {
    x402Version: 1,
    paymentPayload: { ...envelope, ...(extensions ? { extensions } : {}) },
    paymentRequirements: { ...charge.requirements, maxAmountRequired: String(charge.amount) },
  };
}

/** The URL of `path` under the facilitator's base URL; null when the base is no https URL. */
function facilitatorUrl(target: FacilitatorTarget, path: string): URL | null {
  try {
    const base = new URL(target.facilitatorUrl);
    if (base.protocol !== 'https:') return null;
    return new URL(path, base.href.endsWith('/') ? base.href : `${base.href}/`);
  } catch {
    return null;
  }
}

/** The payer the payment's payload names, as sent: the receipt's when the facilitator names none. */
function payerNamed(body: SettleRequest): string {
  const { scheme, payload } = body.paymentPayload;
  return schemeProtocol(scheme)?.payerOf(payload) ?? '';
}

export function createFacilitatorClient(opts: {
  caPem?: string;
  timeoutMs: number;
  allow: string[];
  resolver?: Resolver;
}): FacilitatorClient {
  // The least recently used pool is closed when a new one would pass the bound.
  const pools = new LRUCache<string, Agent>({
    max: MAX_POOLS,
    dispose: (agent, _id, reason) => {
      if (reason === 'evict') void agent.close();
    },
  });

  function poolFor(target: FacilitatorTarget, origin: string): Agent {
    // Keyed by a digest, so no key material is kept as a map key.
    const id = createHash('sha256')
      .update(origin)
      .update('\0')
      .update(target.certPem)
      .update('\0')
      .update(target.keyPem)
      .digest('hex');
    let pool = pools.get(id);
    if (!pool) {
      pool = new Agent({
        connect: checkedConnector({
          allow: opts.allow,
          resolver: opts.resolver,
          connectTimeoutMs: opts.timeoutMs,
          tls: { cert: target.certPem, key: target.keyPem, ...(opts.caPem ? { ca: opts.caPem } : {}) },
        }),
        keepAliveTimeout: 30_000,
        connections: 64,
        maxResponseSize: MAX_FACILITATOR_ANSWER_BYTES,
      });
      pools.set(id, pool);
    }
    return pool;
  }

  type Refusal = { ok: false; error: 'settlement_refused' | 'settlement_unavailable' };

  /**
   * POSTs a /settle body: the answer's JSON on a 200, else the coarse refusal (400, 403 and 429
   * refuse; anything else, a dropped connection or a deadline is not known).
   */
  async function postSettle(
    target: FacilitatorTarget,
    body: unknown,
    timeoutMs = opts.timeoutMs,
  ): Promise<{ ok: true; json: unknown } | Refusal> {
    const url = facilitatorUrl(target, 'settle');
    if (!url) return { ok: false, error: 'settlement_unavailable' };
    const deadlineMs = Math.min(timeoutMs, opts.timeoutMs);
    try {
      // A client span when tracing is on: the facilitator's spans join the caller's trace.
      const res = await traceClientCall(url.href, 'POST', { 'content-type': 'application/json' }, (headers) =>
        request(url, {
          method: 'POST',
          dispatcher: poolFor(target, url.origin),
          headers,
          body: JSON.stringify(body),
          headersTimeout: deadlineMs,
          bodyTimeout: deadlineMs,
          signal: AbortSignal.timeout(deadlineMs),
        }),
      );
      const text = await res.body.text();
      if (res.statusCode === 429 || res.statusCode === 403 || res.statusCode === 400)
        return { ok: false, error: 'settlement_refused' };
      if (res.statusCode !== 200) return { ok: false, error: 'settlement_unavailable' };
      return { ok: true, json: JSON.parse(text) };
    } catch (err) {
      // The guard refused the facilitator's address: nothing was sent, so nothing can be collected.
      if (blockedByGuard(err)) return { ok: false, error: 'settlement_refused' };
      // Handshake refused, connection refused, deadline, an answer that is no JSON: the payment's
      // state is unknown to us, and a retry of the same payment resumes it (the facilitator dedupes).
      return { ok: false, error: 'settlement_unavailable' };
    }
  }

  /** Settles an exact or upto body; `noTransaction`: a success without a transaction is one (a zero charge). */
  async function post(target: FacilitatorTarget, body: SettleRequest, noTransaction: boolean): Promise<SettleOutcome> {
    const posted = await postSettle(target, body);
    if (!posted.ok) return posted;
    const parsed = SettleResponse.safeParse(posted.json);
    if (!parsed.success) return { ok: false, error: 'settlement_unavailable' };
    const answer = parsed.data;
    if (!answer.success) return { ok: false, error: 'settlement_failed' };
    const none = noTransaction && answer.transaction === '';
    if (!none && (!answer.transaction || !/^0x[0-9a-fA-F]{64}$/.test(answer.transaction)))
      return { ok: false, error: 'settlement_unavailable' };
    return {
      ok: true,
      transaction: answer.transaction ?? '',
      network: answer.network ?? body.paymentRequirements.network,
      payer: answer.payer ?? payerNamed(body),
    };
  }

  async function settleChannel(
    target: FacilitatorTarget,
    body: unknown,
    timeoutMs?: number,
  ): Promise<ChannelSettleOutcome> {
    const posted = await postSettle(target, body, timeoutMs);
    if (!posted.ok) return posted;
    const parsed = ChannelSettleAnswer.safeParse(posted.json);
    if (!parsed.success) return { ok: false, error: 'settlement_unavailable' };
    const answer = parsed.data;
    if (!answer.success)
      return { ok: false, error: 'settlement_failed', ...(answer.errorReason ? { reason: answer.errorReason } : {}) };
    const state = ChannelStateAnswer.safeParse(answer.extra?.channelState);
    return {
      ok: true,
      transaction: answer.transaction && /^0x[0-9a-fA-F]{64}$/.test(answer.transaction) ? answer.transaction : '',
      amount: answer.amount && Uint256String.safeParse(answer.amount).success ? answer.amount : '',
      channelState: state.success ? state.data : null,
    };
  }

  return {
    settle: (target, body) => post(target, body, false),
    settleChannel,
    settleCharge: (target, payment, charge) => post(target, chargeBody(payment, charge), charge.amount === 0n),
    async supported(target) {
      const url = facilitatorUrl(target, 'supported');
      if (!url) return null;
      try {
        const res = await request(url, {
          method: 'GET',
          dispatcher: poolFor(target, url.origin),
          headersTimeout: opts.timeoutMs,
          bodyTimeout: opts.timeoutMs,
          signal: AbortSignal.timeout(opts.timeoutMs),
        });
        const text = await res.body.text();
        if (res.statusCode !== 200) return null;
        const parsed = SupportedAnswer.safeParse(JSON.parse(text));
        return parsed.success ? parsed.data.kinds : null;
      } catch {
        return null;
      }
    },
    async close() {
      await Promise.all([...pools.values()].map((p) => p.close()));
      pools.clear();
    },
  };
}
