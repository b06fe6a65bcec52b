// POST /settle, in SPEC order: the client certificate maps to an active account (403), the
// body parses (400), the facilitator is ready (503), the signature holds; then the request is
// stored by key (claim check in PostgreSQL: the signed authorization reaches the workflow only
// by key) and SettlementWorkflow is started by its deterministic id. Nothing touches the chain
// before those checks pass.
// The outbox (a worker in this process, first request of its authorization): the handler runs
// the steps at once, without waiting for the start's acknowledgement: the claim check and the
// settlement row (claim, gas nonce and signed bytes) are committed before anything is sent, and
// the workflow, started alongside or later by the sweeper (facilitator/sweeper.ts), follows
// them through. The caller is answered as soon as the inclusion is known. A duplicate, or a
// facilitator without a worker in its process, waits for the workflow's outcome as before.
import type { TLSSocket } from 'node:tls';
import { getAddress } from 'ethers';
import type { Context } from 'koa';
import getRawBody from 'raw-body';
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type pg from 'pg';
import type { Logger } from '../lib/log.ts';
import type { SettlementWorkflow } from '../workflows/settlement.ts';
import type { SettlementOutcome } from '../activities/settlement/types.ts';
import type { FreshReads, SettlementRunner } from '../activities/settlement/index.ts';
import { outcomeOfRecord } from '../activities/settlement/verify.ts';
import { errorKind } from '../lib/error-kind.ts';
import type { FacilitatorConfig } from './config.ts';
import type { Account } from './accounts.ts';
import type { Readiness } from './readiness.ts';
import type { OutcomeListener } from './outcomes.ts';
import { findSettlement, settlementKey } from './store/records.ts';
import { loadSettleRequest, saveSettleRequest, workflowLabels } from './store/requests.ts';
import { recordWorkflowStart, startSettlementWorkflow } from './workflow-start.ts';
import { recoverAuthorizer } from '../x402/eip3009.ts';
import { authorizationSigner, termsMismatch } from '../x402/verify.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../x402/erc1271.ts';
import { SettleRequest, type PaymentRequirements, type SettleResponse } from '../x402/schemas.ts';

/** The one reason a caller is ever given for a payment that was not collected. */
export const COARSE_FAILURE_REASON = 'settlement_failed';

export type SettleDeps = {
  config: FacilitatorConfig;
  pool: pg.Pool;
  temporal: Client;
  /** The client shares a connection with a worker in this process: start workflows eagerly. */
  eagerStart: boolean;
  /** That worker's runner: the handler runs the steps itself (the outbox; after an eager start). */
  runner?: SettlementRunner;
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

/** The requirements one settlement answers for: a duplicate with others is not that settlement's. */
function sameRequirements(a: PaymentRequirements, b: PaymentRequirements): boolean {
  return (
    a.scheme === b.scheme &&
    a.network === b.network &&
    a.asset.toLowerCase() === b.asset.toLowerCase() &&
    a.payTo.toLowerCase() === b.payTo.toLowerCase() &&
    BigInt(a.maxAmountRequired) === BigInt(b.maxAmountRequired)
  );
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
  const never = new Promise<never>(() => undefined);

  /**
   * Waits for the outcome of a settlement this handler does not run itself: the record's
   * announcement, the record as it already is, the closed run's record or result, or the
   * workflow's result (after a pause), whichever comes first, up to the request deadline.
   * `starting`: this handler's start of the workflow (a rejection other than "closed": thrown).
   */
  async function awaitOutcome(
    key: string,
    starting: ReturnType<typeof startSettlementWorkflow>,
    opts: { eagerRun: boolean; deadline: number },
  ): Promise<SettlementOutcome | 'in_flight'> {
    const { deadline } = opts;
    // Registered before anything below can record the outcome, so it is seen whenever it comes.
    const announced = deps.outcomes.waitFor(key);
    let timer: NodeJS.Timeout | undefined;
    let fallbackTimer: NodeJS.Timeout | undefined;
    // A settlement already decided is answered from its record, without waiting for Temporal
    // (a duplicate of an outbox settlement while Temporal is unreachable, or a late retry).
    const alreadyDecided = findSettlement(deps.pool, key).then(
      (record) =>
        record && !['claimed', 'signed', 'broadcast'].includes(record.status) ? outcomeOfRecord(record) : never,
      () => never,
    );
    try {
      let handle: WorkflowHandle<typeof SettlementWorkflow>;
      let ran: Promise<SettlementOutcome | null> | undefined;
      try {
        const first = await Promise.race([
          starting.then((started) => ({ started })),
          alreadyDecided.then((decided) => ({ decided })),
        ]);
        if ('decided' in first) return first.decided;
        const { started } = first;
        handle = started;
        // Started here, with its first task handed to this process's worker: the run exists, so
        // the steps run at once, here, and its activity waits for them instead of repeating them.
        // A duplicate that attached to an existing run gets no eager task and only waits.
        if (opts.eagerRun && started.eagerlyStarted) ran = deps.runner?.runStarted(key, config.inclusionTimeoutMs);
      } catch (err) {
        const record = await findSettlement(deps.pool, key);
        // Temporal unreachable: a final record still answers (settled through the outbox, its
        // workflow to come from the sweeper); anything else is the caller's to retry (503).
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) {
          if (record?.status === 'settled' || record?.status === 'failed') return outcomeOfRecord(record);
          throw err;
        }
        // Closed: the record is the stable answer (a watcher may have updated it since the run
        // closed); without a record (guardrail refusal) the closed run's own result is.
        if (record) return outcomeOfRecord(record);
        handle = deps.temporal.workflow.getHandle<typeof SettlementWorkflow>(key);
      }
      const fromRecord = announced.promise.then((a): SettlementOutcome => ({
        status: a.status === 'settled' || a.status === 'failed' || a.status === 'rejected' ? a.status : 'pending',
        payer: getAddress(a.payer),
        transaction: a.tx,
        cause: a.cause,
      }));
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
      // A run here (the eager start's, or the outbox run this handler joined) answers with its
      // outcome; if it fails, the activity retries the steps, and the announcement or the
      // workflow's result answers.
      const fromRun = ran
        ? ran.then(
            (o) => o ?? never,
            () => never,
          )
        : never;
      return await Promise.race([
        fromRun,
        fromRecord,
        alreadyDecided,
        fromWorkflow.catch((err) => (Date.now() >= deadline - 50 ? ('in_flight' as const) : Promise.reject(err))),
        timeUp,
      ]);
    } finally {
      clearTimeout(timer);
      clearTimeout(fallbackTimer);
      announced.cancel();
    }
  }

  /**
   * Whether the request stored for `key` (the one that owns its settlement) came from this
   * account with these requirements. Only then is a duplicate answered with that settlement's
   * outcome; another account, or other requirements, must never learn its transaction.
   */
  async function sameSubmission(key: string, accountId: string, request: SettleRequest): Promise<boolean> {
    const stored = await loadSettleRequest(deps.pool, key);
    return (
      !stored ||
      (stored.accountId === accountId &&
        sameRequirements(stored.request.paymentRequirements, request.paymentRequirements))
    );
  }

  /**
   * The answer to an authorization some other submission owns: a consumed nonce, as far as this
   * caller is concerned, once that settlement is decided; before, 'in_flight' (503), since its
   * transfer may still land (the caller may be the owner's own gateway under another account).
   */
  async function consumedElsewhere(key: string, request: SettleRequest): Promise<SettlementOutcome | 'in_flight'> {
    const record = await findSettlement(deps.pool, key);
    if (record && record.status !== 'settled' && record.status !== 'failed') return 'in_flight';
    return {
      status: 'failed',
      payer: request.paymentPayload.payload.authorization.from,
      transaction: null,
      cause: 'nonce_used',
    };
  }

  /**
   * The outbox (a worker in this process): the steps run here at once, before the workflow is
   * started, for a request not stored before; the claim check is stored with the claim. The
   * start is issued once the outcome is known (off the caller's path; its acknowledgement is
   * recorded on the request, else the sweeper starts the workflow). Temporal unreachable does
   * not stop the settlement: what was claimed is durable, and its workflow comes once Temporal
   * is back. A duplicate or retry (request stored before) waits for the workflow as before.
   */
  async function settleHere(
    key: string,
    accountId: string,
    request: SettleRequest,
    runner: SettlementRunner,
    deadline: number,
    reads?: FreshReads,
  ): Promise<SettlementOutcome | 'in_flight'> {
    const start = () => {
      const starting = startSettlementWorkflow(deps.temporal, config, key, workflowLabels(request), deps.eagerStart);
      starting.catch(() => undefined);
      void recordWorkflowStart(deps.pool, key, starting).then(
        (ok) => ok || deps.log.warn({ key }, 'settlement workflow not started; the sweeper will start it'),
      );
      return starting;
    };
    const run = runner.runFresh(key, accountId, request, config.inclusionTimeoutMs, reads).catch((err: unknown) => {
      // The steps failed here (database or node): the workflow's activity retries them. Only the
      // error's kind is logged (error-kind.ts).
      deps.log.warn({ key, err: errorKind(err) }, 'settle steps failed in the handler; left to the workflow');
      return null;
    });
    // The caller is answered by the deadline: a run still going on then (a slow node, or a
    // duplicate waiting for the run it joined) goes on, and its workflow is started when it ends.
    let timer: NodeJS.Timeout | undefined;
    const timeUp = new Promise<'in_flight'>((resolve) => {
      timer = setTimeout(() => resolve('in_flight'), Math.max(deadline - Date.now(), 0));
    });
    const outcome = await Promise.race([run, timeUp]).finally(() => clearTimeout(timer));
    if (outcome === 'in_flight') {
      void run.then((ended) => {
        if (ended && ended !== 'stored_before') start();
      });
      return outcome;
    }
    if (outcome && outcome !== 'stored_before') {
      start();
      return outcome;
    }
    // Stored before (a duplicate or retry), claimed by another run, or the steps failed here:
    // the claim check is stored (it may not be yet) before the workflow starts, and the
    // workflow's outcome answers; its eager task (a start of ours) runs the steps here.
    const stored = await saveSettleRequest(deps.pool, key, accountId, request);
    if (!stored && !(await sameSubmission(key, accountId, request))) return consumedElsewhere(key, request);
    return awaitOutcome(key, start(), { eagerRun: outcome === 'stored_before', deadline });
  }

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
    const reads = deps.runner?.read(key, account.id, request);
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

    let outcome: SettlementOutcome | 'in_flight';
    try {
      if (deps.runner) outcome = await settleHere(key, account.id, request, deps.runner, deadline, reads);
      else {
        // No worker here: the claim check is written before the workflow starts (a run that
        // started without it could only wait for a retry to write it), and the workflow settles.
        const stored = await saveSettleRequest(deps.pool, key, account.id, request);
        if (!stored && !(await sameSubmission(key, account.id, request)))
          outcome = await consumedElsewhere(key, request);
        else {
          const starting = startSettlementWorkflow(deps.temporal, config, key, workflowLabels(request), false);
          outcome = await awaitOutcome(key, starting, { eagerRun: false, deadline });
          void recordWorkflowStart(deps.pool, key, starting);
        }
      }
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
