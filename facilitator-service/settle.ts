// POST /settle, in the v1 contract's order: the client certificate maps to an active account (403), the
// body parses (400), the facilitator is ready (503), the signature holds and the requirements
// match the authorization (else success false, nothing claimed); then the settlement's owner
// (owner.ts) settles it, and the outcome is mapped to the answer: 200 with the
// outcome, 429 for a guardrail, 503 while the transfer may still land or when the request
// could not be handed over. Nothing touches the chain before those checks pass.
import type { TLSSocket } from 'node:tls';
import type { Context } from 'koa';
import getRawBody from 'raw-body';
import { errorKind } from '../lib/error-kind.ts';
import type { FacilitatorConfig } from '../facilitator/config.ts';
import type { Account } from '../facilitator/accounts.ts';
import type { Readiness } from './readiness.ts';
import { settlementKey } from '../facilitator/store/records.ts';
import { staticGuardrail } from '../facilitator/store/reservations.ts';
import { createSettlementOwner, type OwnerDeps } from './owner.ts';
import type { SettlementOutcome } from '../facilitator/settlement/types.ts';
import { recoverAuthorizer } from '../x402/eip3009.ts';
import { authorizationSigner, termsMismatch } from '../x402/verify.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../x402/erc1271.ts';
import { SettleRequest, type SettleResponse } from '../x402/schemas.ts';

/** The one reason a caller is ever given for a payment that was not collected. */
const COARSE_FAILURE_REASON = 'settlement_failed';

export type SettleDeps = OwnerDeps & {
  config: FacilitatorConfig;
  readiness: Readiness;
  lookupAccount: (fingerprint: string) => Promise<Account | null>;
};

const MAX_BODY = '64kb';

function reply(ctx: Context, status: number, body: unknown, headers: Record<string, string> = {}): void {
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

function toResponse(outcome: SettlementOutcome, network: string): SettleResponse {
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

/**
 * Why the request's requirements cannot be those of its authorization (null when they can):
 * the time-independent terms, checked before the request may open or join a settlement.
 */
function requirementsMismatch(config: FacilitatorConfig, request: SettleRequest): string | null {
  const { paymentPayload: payment, paymentRequirements: requirements } = request;
  if (request.x402Version !== 1) return 'unsupported_version';
  if (requirements.scheme !== payment.scheme || requirements.network !== payment.network)
    return 'requirements_mismatch';
  return termsMismatch(payment, {
    network: config.network,
    domain: config.domain,
    asset: requirements.asset,
    payTo: requirements.payTo,
    amount: { atMost: BigInt(requirements.maxAmountRequired) },
  });
}

export function settleHandler(deps: SettleDeps) {
  const { config } = deps;
  const owner = createSettlementOwner(deps);

  return async function settle(ctx: Context): Promise<void> {
    // Every answer, final or 503, is given by this moment.
    const deadline = Date.now() + config.settleDeadlineMs;
    const fingerprint = peerFingerprint(ctx);
    // The account lookup (cached) and the body read overlap; the answers keep their order.
    const looked = fingerprint ? deps.lookupAccount(fingerprint) : Promise.resolve(null);
    const raw = getRawBody(ctx.req, { limit: MAX_BODY });
    raw.catch(() => undefined);
    const account = await looked;
    if (!account || !account.active) return reply(ctx, 403, { error: 'forbidden' });

    let request: SettleRequest;
    try {
      const parsed = SettleRequest.safeParse(JSON.parse((await raw).toString('utf8')));
      if (!parsed.success) return reply(ctx, 400, { error: 'malformed settle request' });
      request = parsed.data;
    } catch {
      return reply(ctx, 400, { error: 'malformed settle request' });
    }

    const authorization = request.paymentPayload.payload.authorization;
    const signature = request.paymentPayload.payload.signature;
    const key = settlementKey(config.domain.chainId, config.tokenAddress, authorization.from, authorization.nonce);
    // The outbox's reads (chain, records; nothing written) travel while readiness and the
    // signature are checked; a request refused below never uses them.
    const reads = owner.read(key, account.id, request);
    // Lets those requests reach their sockets before the signature recovery holds the thread.
    if (reads) await new Promise((resolve) => setImmediate(resolve));
    // Only a request whose signature holds may open (and so name) a settlement: otherwise a
    // forged request could occupy a payer's nonce before the real one arrives.
    // An EOA's signature recovers `from` (no I/O); a contract wallet's is accepted by `from`
    // (ERC-1271, an eth_call), asked while readiness is read.
    const signing = authorizationSigner(
      config.domain,
      authorization,
      signature,
      contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS),
    ).catch(() => 'unreachable' as const);
    const readiness = await deps.readiness.current();
    if (!readiness.ready) return reply(ctx, 503, { error: 'facilitator not ready' }, { 'Retry-After': '5' });
    const signedBy = await signing;
    if (signedBy === 'unreachable')
      return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    if (!signedBy) {
      deps.log.info({ account: account.id, cause: 'invalid_signature' }, 'settle refused before any claim');
      const payer = recoverAuthorizer(config.domain, authorization, signature) ? authorization.from : '';
      return reply(
        ctx,
        200,
        toResponse({ status: 'failed', payer, transaction: null, cause: 'invalid_signature' }, config.network),
      );
    }
    // Requirements that do not match the authorization claim nothing, so they cannot poison it
    // for the submission that carries the right ones.
    const mismatch = requirementsMismatch(config, request);
    if (mismatch) {
      deps.log.info({ account: account.id, cause: mismatch }, 'settle refused before any claim');
      return reply(
        ctx,
        200,
        toResponse({ status: 'failed', payer: authorization.from, transaction: null, cause: mismatch }, config.network),
      );
    }

    // The guardrails that need no usage, before anything is stored: a submission they refuse
    // claims nothing, so it cannot take the authorization from the account it belongs to.
    const refused = staticGuardrail({
      account,
      kind: { network: request.paymentRequirements.network, asset: request.paymentRequirements.asset },
      amount: BigInt(authorization.value),
      defaults: config.guardrails,
    });
    if (refused) {
      deps.log.info({ account: account.id, cause: refused }, 'settle refused before any claim');
      return reply(ctx, 429, { error: 'settlement limit exceeded' });
    }

    let outcome: SettlementOutcome | 'in_flight';
    try {
      outcome = await owner.settle(key, account.id, request, deadline, reads);
    } catch (err) {
      // PostgreSQL or Temporal unreachable: a protocol failure the caller may retry (the
      // settlement, if it started, goes on and dedupes the retry).
      deps.log.warn({ key, err: errorKind(err) }, 'settle could not be handed over');
      return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    }
    // Not mined yet (neither the transfer nor its cancel): not a collection outcome, since the
    // transfer may still land; the caller retries and gets the outcome once one is mined.
    if (outcome === 'in_flight' || outcome.status === 'pending') {
      return reply(ctx, 503, { error: 'settlement in progress' }, { 'Retry-After': '2' });
    }
    deps.log.info(
      { key, account: account.id, status: outcome.status, cause: outcome.cause, transaction: outcome.transaction },
      'settle',
    );
    if (outcome.status === 'rejected') return reply(ctx, 429, { error: 'settlement limit exceeded' });
    return reply(ctx, 200, toResponse(outcome, config.network));
  };
}
