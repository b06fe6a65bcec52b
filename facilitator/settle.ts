// POST /settle, in SPEC order: the client certificate maps to an active account (403), the
// body parses (400), the facilitator is ready (503); then the authorization is handed to
// SettlementWorkflow, started or attached by its deterministic id, and the caller waits for
// its outcome up to the request deadline. Nothing touches the chain before those checks pass,
// and the signed authorization reaches the workflow only by key (claim check in PostgreSQL).
import type { TLSSocket } from 'node:tls';
import { getAddress } from 'ethers';
import type { Context } from 'koa';
import getRawBody from 'raw-body';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type pg from 'pg';
import type { Logger } from '../api/log.ts';
import type { SettlementWorkflow } from '../workflows/settlement.ts';
import type { SettlementOutcome } from '../activities/settlement/types.ts';
import type { SettlementPrefetch } from '../activities/settlement/index.ts';
import { outcomeOfRecord } from '../activities/settlement/verify.ts';
import { Payer, SettlementStatus } from '../temporal/search-attributes.ts';
import type { FacilitatorConfig } from './config.ts';
import type { Account } from './accounts.ts';
import type { Readiness } from './readiness.ts';
import type { OutcomeListener } from './outcomes.ts';
import { findSettlement, saveSettleRequest, settlementKey } from './store.ts';
import { recoverAuthorizer } from './x402/eip3009.ts';
import { authorizationSigner } from './x402/verify.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from './x402/erc1271.ts';
import { SettleRequest, type SettleResponse } from './x402/schemas.ts';

/** The one reason a caller is ever given for a payment that was not collected. */
export const COARSE_FAILURE_REASON = 'settlement_failed';

export type SettleDeps = {
  config: FacilitatorConfig;
  pool: pg.Pool;
  temporal: Client;
  /** The client shares a connection with a worker in this process: start workflows eagerly. */
  eagerStart: boolean;
  /** That worker's prefetch: the first step's reads start while the workflow start is on its way. */
  prefetch?: SettlementPrefetch;
  readiness: Readiness;
  lookupAccount: (fingerprint: string) => Promise<Account | null>;
  outcomes: OutcomeListener;
  log: Logger;
};

const MAX_BODY = '64kb';
const WORKFLOW_RESULT_FALLBACK_MS = 1_000;

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

export function settleHandler(deps: SettleDeps) {
  const { config } = deps;

  async function awaitOutcome(key: string, payer: string, request: SettleRequest): Promise<SettlementOutcome | 'in_flight'> {
    const deadline = Date.now() + config.settleDeadlineMs;
    // Registered before the start, so an outcome recorded at any point after it is seen.
    const announced = deps.outcomes.waitFor(key);
    let timer: NodeJS.Timeout | undefined;
    let fallbackTimer: NodeJS.Timeout | undefined;
    try {
      let handle;
      let ran: Promise<SettlementOutcome> | undefined;
      try {
        const starting = deps.temporal.workflow.start<typeof SettlementWorkflow>('SettlementWorkflow', {
          taskQueue: config.temporal.taskQueue,
          workflowId: key,
          args: [{ key, inclusionTimeoutMs: config.inclusionTimeoutMs }],
          // A duplicate attaches to the running settlement; a closed one is never run again.
          workflowIdConflictPolicy: 'USE_EXISTING',
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
          requestEagerStart: deps.eagerStart,
          typedSearchAttributes: [
            { key: Payer, value: payer },
            { key: SettlementStatus, value: 'received' },
          ],
          staticSummary: `${request.paymentPayload.payload.authorization.value} to ${request.paymentRequirements.payTo} from ${payer}`,
        });
        handle = await starting;
        // Started here, with its first task handed to this process's worker: the run exists (so
        // someone watches whatever happens next) and its activity runs in this process, so the
        // steps run at once, here, and that activity waits for them instead of repeating them.
        // A duplicate that attached to an existing run gets no eager task and only waits.
        if (handle.eagerlyStarted) ran = deps.prefetch?.runNow?.(key, config.inclusionTimeoutMs);
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        // Closed: the record is the stable answer (a watcher may have updated it since the run
        // closed); without a record (guardrail refusal) the closed run's own result is.
        const record = await findSettlement(deps.pool, key);
        if (record) return outcomeOfRecord(record);
        handle = deps.temporal.workflow.getHandle<typeof SettlementWorkflow>(key);
      }
      const fromRecord = announced.promise.then(
        (a): SettlementOutcome => ({
          status: a.status === 'settled' || a.status === 'failed' || a.status === 'rejected' ? a.status : 'pending',
          payer: getAddress(a.payer),
          transaction: a.tx,
          cause: a.cause,
        }),
      );
      // The workflow's own result is the fallback for an announcement this process missed (its
      // LISTEN connection was down). Asked only after a pause, so the common case costs the
      // Temporal server no history long-poll per settle.
      const fromWorkflow = new Promise<void>((resolve) => {
        fallbackTimer = setTimeout(resolve, WORKFLOW_RESULT_FALLBACK_MS);
      }).then(() => deps.temporal.connection.withDeadline(deadline, () => handle.result()));
      const timeUp = new Promise<'in_flight'>((resolve) => {
        timer = setTimeout(() => resolve('in_flight'), Math.max(deadline - Date.now(), 0));
      });
      fromWorkflow.catch(() => undefined);
      // A duplicate that attached to a run whose outcome was already announced reads it instead.
      const alreadyDecided = findSettlement(deps.pool, key).then((record) =>
        record && !['claimed', 'signed', 'broadcast'].includes(record.status) ? outcomeOfRecord(record) : new Promise<never>(() => undefined),
      );
      alreadyDecided.catch(() => undefined);
      // The run here answers with the outcome it recorded; if it fails, the activity retries the
      // steps, and the announcement or the workflow's result answers.
      const fromRun = ran ? ran.catch(() => new Promise<never>(() => undefined)) : new Promise<never>(() => undefined);
      return await Promise.race([fromRun, fromRecord, alreadyDecided, fromWorkflow.catch((err) => (Date.now() >= deadline - 50 ? ('in_flight' as const) : Promise.reject(err))), timeUp]);
    } finally {
      clearTimeout(timer);
      clearTimeout(fallbackTimer);
      announced.cancel();
    }
  }

  return async function settle(ctx: Context): Promise<void> {
    const fingerprint = peerFingerprint(ctx);
    const account = fingerprint ? await deps.lookupAccount(fingerprint) : null;
    if (!account || !account.active) return reply(ctx, 403, { error: 'forbidden' });

    let request: SettleRequest;
    try {
      const parsed = SettleRequest.safeParse(JSON.parse((await getRawBody(ctx.req, { limit: MAX_BODY })).toString('utf8')));
      if (!parsed.success) return reply(ctx, 400, { error: 'malformed settle request' });
      request = parsed.data;
    } catch {
      return reply(ctx, 400, { error: 'malformed settle request' });
    }

    const readiness = await deps.readiness.current();
    if (!readiness.ready) return reply(ctx, 503, { error: 'facilitator not ready' }, { 'Retry-After': '5' });

    const authorization = request.paymentPayload.payload.authorization;
    // Only a request whose signature holds may open (and so name) a settlement: otherwise a
    // forged request could occupy a payer's nonce before the real one arrives.
    // An EOA's signature recovers `from`; a contract wallet's is accepted by `from` (ERC-1271, an eth_call).
    const signature = request.paymentPayload.payload.signature;
    const signedBy = await authorizationSigner(config.domain, authorization, signature, contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS)).catch(() => 'unreachable' as const);
    if (signedBy === 'unreachable') return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    if (!signedBy) {
      deps.log.info({ account: account.id, cause: 'invalid_signature' }, 'settle refused before any claim');
      const payer = recoverAuthorizer(config.domain, authorization, signature) ? authorization.from : '';
      return reply(ctx, 200, toResponse({ status: 'failed', payer, transaction: null, cause: 'invalid_signature' }, config.network));
    }
    const signer = getAddress(authorization.from.toLowerCase());

    const key = settlementKey(config.domain.chainId, config.tokenAddress, authorization.from, authorization.nonce);
    let outcome: SettlementOutcome | 'in_flight';
    try {
      // The claim check is written before the workflow starts (a run that started without it
      // could only wait for a retry to write it).
      const saved = saveSettleRequest(deps.pool, key, account.id, request);
      // This process's worker starts the first step's reads at once, while the claim check is
      // written and the workflow start is on its way (they use the request only once it is stored).
      deps.prefetch?.(key, account.id, request, saved);
      await saved;
      outcome = await awaitOutcome(key, signer, request);
    } catch (err) {
      // PostgreSQL or Temporal unreachable: a protocol failure the caller may retry (the
      // settlement, if it started, goes on and dedupes the retry).
      deps.log.warn({ key, err: (err as Error).message }, 'settle could not be handed over');
      return reply(ctx, 503, { error: 'facilitator unavailable' }, { 'Retry-After': '2' });
    }
    if (outcome === 'in_flight') {
      return reply(ctx, 503, { error: 'settlement in progress' }, { 'Retry-After': '2' });
    }
    deps.log.info({ key, account: account.id, status: outcome.status, cause: outcome.cause, transaction: outcome.transaction }, 'settle');
    if (outcome.status === 'rejected') return reply(ctx, 429, { error: 'settlement limit exceeded' });
    return reply(ctx, 200, toResponse(outcome, config.network));
  };
}
