// POST /settle, in the v1 contract's order: the client certificate maps to an active account
// (403), the body parses as a settle request (400; an x402 v2 body is taken only by a scheme
// that reads one: upto, batch-settlement), then the scheme that settles the
// requirements' (scheme, network) takes it (facilitator/schemes/: its payload, readiness 503,
// signature and terms, guardrails 429, then the settlement's owner, owner.ts), and its answer is
// mapped here: 200 with the outcome, 429 for a guardrail, 503 while the transfer may still land
// or when the request could not be handed over. A kind no scheme settles is answered as a
// payment not collected, once the facilitator is ready. Nothing touches the chain before the
// scheme's checks pass.
import type { TLSSocket } from 'node:tls';
import type { Context } from 'koa';
import type { JsonRpcProvider } from 'ethers';
import getRawBody from 'raw-body';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { Account } from '../facilitator/accounts.ts';
import type { Readiness } from './readiness.ts';
import { createSettlementOwner, type OwnerDeps } from './owner.ts';
import type { SettlementOutcome } from '../facilitator/settlement/types.ts';
import { settlersFor } from '../facilitator/schemes/index.ts';
import type { SchemeDeps, SettleAnswer } from '../facilitator/schemes/scheme.ts';
import { schemeProtocol } from '../x402/schemes/index.ts';
import { v2SettleKind } from '../x402/schemes/upto/settle-request.ts';
import { SettleRequest, type SettleResponse } from '../x402/schemas.ts';

/** The one reason a caller is ever given for a payment that was not collected. */
const COARSE_FAILURE_REASON = 'settlement_failed';

export type SettleDeps = OwnerDeps & {
  config: FacilitatorConfig;
  readiness: Readiness;
  /** The chain, for the schemes that read it before naming a settlement. */
  chain: JsonRpcProvider;
  lookupAccount: (fingerprint: string) => Promise<Account | null>;
};

// A batch-settlement claim of MAX_CLAIM_ROWS rows is about 65 KB; any other body is far smaller.
const MAX_BODY = '160kb';

export function reply(ctx: Context, status: number, body: unknown, headers: Record<string, string> = {}): void {
  ctx.status = status;
  ctx.set(headers);
  ctx.body = body;
}

function peerFingerprint(ctx: Context): string | null {
  const socket = ctx.req.socket as TLSSocket;
  if (!socket.authorized) return null;
  const fingerprint = socket.getPeerCertificate()?.fingerprint256;
  return fingerprint ? fingerprint.replaceAll(':', '').toLowerCase() : null;
}

/**
 * `amount`: what an upto or batch-settlement settlement moved, which its answer names (and, for
 * 0, an empty transaction); `extra`: what the scheme adds (a batch-settlement channel's state).
 */
type AmountSettleResponse = SettleResponse & { amount?: string; extra?: Record<string, unknown> };

function toResponse(
  outcome: SettlementOutcome,
  network: string,
  charged?: { amount: string },
  extra?: Record<string, unknown>,
): AmountSettleResponse {
  if (charged && outcome.status === 'settled')
    return {
      success: true,
      transaction: outcome.transaction ?? '',
      network,
      payer: outcome.payer,
      amount: charged.amount,
      ...(extra ? { extra } : {}),
    };
  if (outcome.status === 'settled') {
    return { success: true, transaction: outcome.transaction ?? undefined, network, payer: outcome.payer };
  }
  return {
    success: false,
    errorReason: COARSE_FAILURE_REASON,
    network,
    payer: outcome.payer || undefined,
    ...(outcome.transaction ? { transaction: outcome.transaction } : {}),
  };
}

/** A scheme's answer, as HTTP says it. */
function answer(ctx: Context, config: FacilitatorConfig, settled: SettleAnswer): void {
  switch (settled.answer) {
    case 'outcome':
      // An upto answer names the network as its request did (CAIP-2 from an x402 v2 body).
      return reply(
        ctx,
        200,
        toResponse(settled.outcome, settled.charged?.network ?? config.network, settled.charged, settled.extra),
      );
    case 'malformed':
      return reply(ctx, 400, { error: 'malformed settle request' });
    case 'not_ready':
      return reply(ctx, 503, { error: 'facilitator not ready' }, { 'Retry-After': '5' });
    case 'unavailable':
      return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    case 'in_progress':
      return reply(ctx, 503, { error: 'settlement in progress' }, { 'Retry-After': '2' });
    case 'limit':
      return reply(ctx, 429, { error: 'settlement limit exceeded' });
  }
}

/** What every scheme's handler is built with, from the door's dependencies. */
export function schemeDeps(deps: SettleDeps): SchemeDeps {
  return {
    config: deps.config,
    log: deps.log,
    readiness: deps.readiness,
    settlements: createSettlementOwner(deps),
    chain: deps.chain,
    pool: deps.pool,
  };
}

/**
 * The account the client certificate maps to (403 when none is active) and the body as JSON
 * (400 when it is none), read at once; null when it answered.
 */
export async function admit(
  ctx: Context,
  deps: SettleDeps,
  what: 'settle' | 'verify',
): Promise<{ account: Account; body: unknown } | null> {
  const fingerprint = peerFingerprint(ctx);
  // The account lookup (cached) and the body read overlap; the answers keep their order.
  const looked = fingerprint ? deps.lookupAccount(fingerprint) : Promise.resolve(null);
  const raw = getRawBody(ctx.req, { limit: MAX_BODY });
  raw.catch(() => undefined);
  const account = await looked;
  if (!account || !account.active) {
    reply(ctx, 403, { error: 'forbidden' });
    return null;
  }
  try {
    return { account, body: JSON.parse((await raw).toString('utf8')) };
  } catch {
    reply(ctx, 400, { error: `malformed ${what} request` });
    return null;
  }
}

export function settleHandler(deps: SettleDeps) {
  const { config } = deps;
  const settlerOf = settlersFor(schemeDeps(deps));

  return async function settle(ctx: Context): Promise<void> {
    // Every answer, final or 503, is given by this moment.
    const deadline = Date.now() + config.settleDeadlineMs;
    const admitted = await admit(ctx, deps, 'settle');
    if (!admitted) return;
    const { account, body } = admitted;
    // A v1 settle request (any scheme), else an x402 v2 one, which only a scheme that reads it takes.
    const parsed = SettleRequest.safeParse(body);
    const kind = parsed.success ? parsed.data.paymentRequirements : v2SettleKind(body);
    const v2Settler = !parsed.success && kind ? settlerOf(kind.scheme, kind.network) : null;
    if (v2Settler) return answer(ctx, config, await v2Settler(null, { account, deadline, body }));
    if (!parsed.success) return reply(ctx, 400, { error: 'malformed settle request' });
    const request = parsed.data;

    const { scheme, network } = request.paymentRequirements;
    const settler = settlerOf(scheme, network);
    if (settler) return answer(ctx, config, await settler(request, { account, deadline, body }));
    // A kind this facilitator does not settle: not collected, and nothing claimed.
    const readiness = await deps.readiness.current();
    if (!readiness.ready) return answer(ctx, config, { answer: 'not_ready' });
    const known = schemeProtocol(scheme);
    const cause = known ? 'network_mismatch' : 'unsupported_scheme';
    deps.log.info({ account: account.id, cause }, 'settle refused before any claim');
    const payer = known?.payerOf(request.paymentPayload.payload) ?? '';
    return answer(ctx, config, { answer: 'outcome', outcome: { status: 'failed', payer, transaction: null, cause } });
  };
}
