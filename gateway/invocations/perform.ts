// Performing a transactional invocation: load what the row references (its stored body), call
// the upstream through the shared client (SSRF guard, breaker, retries), record the outcome.
// Idempotent by design: a retried attempt finds the row already terminal and returns it; an
// attempt that may already have reached the upstream before its worker died is not re-sent
// unless the agent opted in (retry_non_idempotent). The outcome rule is outcome.ts's. The
// Temporal activity (activities/invocation.ts) runs it with its attempt's heartbeat and
// cancellation, and turns InvocationNotPerformed and an unavailable credential into failures.
import type { UpstreamClient, UpstreamResponse } from '../upstream/client.ts';
import { UpstreamError, brokenBodyClass, classifyError, type ErrorClass } from '../upstream/errors.ts';
import { bodyHasher } from '../receipts/digest.ts';
import type { BodyStore } from '../body-store.ts';
import { CredentialUnavailable, type CredentialResolver } from '../credentials/resolver.ts';
import { createTaskBindings, taskCaller, type TaskBindings } from '../a2a/tasks.ts';
import { taskOfResult, type TaskSeen } from '../a2a/methods.ts';
import { queryRows, type GatewayDb } from '../db/orm.ts';
import { errorKind } from '../../lib/error-kind.ts';
import type { StatementPool } from '../db/statement-pool.ts';
import { createInvocationStore, type BodyInsert, type Completion, type InvocationOutcome } from './store.ts';
import { answeredOutcome } from './outcome.ts';
import { failedOutcome, meteredCall, meteredRequestUnderOwnId, meterOf } from './metered.ts';
import type { Readable } from 'node:stream';
import { decodedAnswer, idRestorer, type IdRestorer } from '../jsonrpc/own-id.ts';
import { TRANSACTIONAL_LEASE_SECONDS } from '../payment/channels/store.ts';
import type { MeterReader } from '../metering/reader.ts';

export type PerformDeps = {
  orm: GatewayDb;
  upstream: UpstreamClient;
  bodies: BodyStore;
  credentials: CredentialResolver;
  /** Overall deadline of one upstream call, retries and body included. */
  upstreamTimeoutMs: number;
  /** The worker's prepared statements (db/statement-pool.ts); a pool of the call store's own when absent. */
  statements?: StatementPool;
};

/** What the attempt running the call gives it (the activity's context). */
export type Attempt = {
  /** Says the attempt is alive (every 2 s while the upstream is called). */
  heartbeat(): void;
  /** Aborted when the attempt is cancelled. */
  signal: AbortSignal;
  /**
   * Whether this attempt was cancelled because its workflow ended (terminated, cancelled, or
   * closed) rather than by its own deadline: the row then says so.
   */
  endedByWorkflow(): boolean;
  warn(message: string, attributes: Record<string, unknown>): void;
};

/**
 * Why an attempt did not perform the call and is to be retried: the row is not there (deleted,
 * or a workflow started by hand), its agent is not, or another attempt counted itself since
 * this one loaded the row.
 */
export class InvocationNotPerformed extends Error {
  readonly reason: 'row_missing' | 'agent_missing' | 'attempt_leased';
  constructor(reason: InvocationNotPerformed['reason']) {
    super(reason);
    this.name = 'InvocationNotPerformed';
    this.reason = reason;
  }
}

/** Largest response body kept when capture_body is on (the request side has the same cap). */
const MAX_CAPTURED_RESPONSE = 32 * 1024 * 1024;

/**
 * Reads the whole answer (the deadline bounds it), keeping it only when capture is on and it
 * fits, or (an A2A agent's, whose tasks are bound from it) when it fits in `keep` bytes;
 * `broken` is the class of a body that broke off, null when it passed whole.
 */
async function readResponse(
  reply: UpstreamResponse,
  /** The answer's bytes: its body, or that body decoded (decodedAnswer). */
  body: Readable,
  capture: boolean,
  keep: number,
  meter: MeterReader | null,
  /** Puts the caller's JSON-RPC id back where the gateway's own answered (the meter reads the answer as sent). */
  restore: IdRestorer | null,
): Promise<{
  firstByteMs: number | null;
  captured: Buffer | null;
  kept: Buffer | null;
  broken: ErrorClass | null;
  sha256: string | null;
}> {
  let firstByteMs: number | null = null;
  const chunks: Buffer[] = [];
  let size = 0;
  // The digest a trust receipt commits to, whether or not the body is kept.
  const digest = bodyHasher();
  // A metered agent's meter reads the answer as it passes (it holds at most its own bound).
  meter?.onHeaders(reply.headers);
  try {
    const take = (chunk: Buffer) => {
      size += chunk.length;
      digest.update(chunk);
      if ((capture && size <= MAX_CAPTURED_RESPONSE) || size <= keep) chunks.push(chunk);
    };
    for await (const chunk of body as AsyncIterable<Buffer>) {
      firstByteMs ??= Math.round(performance.now() - reply.startedAt);
      meter?.onChunk(chunk);
      take(restore ? restore.push(chunk) : chunk);
    }
    if (restore) take(restore.end());
  } catch (err) {
    return { firstByteMs, captured: null, kept: null, broken: brokenBodyClass(err, reply.timedOut()), sha256: null };
  } finally {
    reply.finish();
  }
  digest.finish(true);
  return {
    firstByteMs,
    captured: capture && size <= MAX_CAPTURED_RESPONSE ? Buffer.concat(chunks) : null,
    kept: size <= keep ? Buffer.concat(chunks) : null,
    broken: null,
    sha256: digest.value(),
  };
}

/** The largest A2A answer whose task is bound (a JSON-RPC answer; a larger one binds nothing). */
const MAX_A2A_ANSWER = 1024 * 1024;

/**
 * Binds the task an A2A answer names to the agent and the call's caller side, and answers it
 * (the completion records it when the request named none).
 */
async function bindAnsweredTask(
  tasks: TaskBindings,
  row: { tenantId: string; caller: string; callerKind: string },
  agentId: string,
  body: Buffer,
  attempt: Attempt,
): Promise<TaskSeen | null> {
  let task;
  try {
    task = taskOfResult((JSON.parse(body.toString('utf8')) as { result?: unknown } | null)?.result);
  } catch {
    return null;
  }
  if (!task) return null;
  // A binding that fails leaves the call as it was (its answer is the caller's); a later call
  // about the task is refused as unbound.
  const caller = taskCaller({ kind: row.callerKind, userId: row.caller });
  await tasks.bind(row.tenantId, agentId, caller, [task]).catch((err: unknown) => {
    attempt.warn('could not bind an A2A task', { err: errorKind(err) });
  });
  return task;
}

export function createInvocationPerformer(deps: PerformDeps) {
  const store = createInvocationStore(deps.orm, deps.statements);
  // A channel payment's lease, renewed as an attempt is counted, outlasts the attempt.
  const leaseSeconds = Math.max(TRANSACTIONAL_LEASE_SECONDS, Math.ceil(deps.upstreamTimeoutMs / 1000) + 60);
  const tasks = createTaskBindings(queryRows(deps.orm));
  // A body store in the gateway's own database (it offers insertSql) is read in the load
  // statement and written in the completing one; any other goes through its interface.
  const insertBody = deps.bodies.insertSql?.bind(deps.bodies);

  async function complete(invocationId: string, completion: Completion, body?: BodyInsert): Promise<InvocationOutcome> {
    // No row: it is gone (see perform's load). Nothing was sent; the workflow ends
    // with the outcome `internal`.
    return (
      (await store.complete(invocationId, completion, body)) ?? {
        status: 'failed',
        upstreamStatus: null,
        latencyMs: null,
        errorClass: 'internal',
      }
    );
  }

  return {
    /**
     * Performs the call of this row once: loads it, resolves the credential, calls the upstream
     * and completes the row. Throws InvocationNotPerformed for an attempt to retry, and a
     * retryable CredentialUnavailable as it is.
     */
    async perform(invocationId: string, attempt: Attempt): Promise<InvocationOutcome> {
      const row = await store.load(invocationId, { withBody: insertBody !== undefined, leaseSeconds });
      // The accept commit writes the row before anything starts the workflow (the route or the
      // start relay), so a missing row was deleted since, or the workflow was started by hand.
      // The attempt fails as benign (logged at debug, not as a failed activity) and is retried
      // until its attempts run out; abandonInvocation then finds no row either.
      if (!row) throw new InvocationNotPerformed('row_missing');
      // A metered call's outcome says its charge is due whichever attempt answers it: an attempt
      // whose worker died after completing the row is retried here, and its workflow must still
      // settle the charge (the store's completion answers the same).
      if (row.status === 'succeeded' || row.status === 'failed')
        return {
          status: row.status,
          upstreamStatus: row.upstreamStatus,
          latencyMs: row.latencyMs,
          errorClass: row.errorClass,
          ...(row.paymentMaxAmount !== null ? { chargeDue: true as const } : {}),
        };
      const agent = row.agent;
      if (!agent) throw new InvocationNotPerformed('agent_missing');

      // An earlier attempt may have delivered the request before its worker died.
      if (row.attempts > 0 && !agent.retryNonIdempotent)
        return complete(invocationId, { status: 'failed', errorClass: 'interrupted' });
      if (!agent.upstreamUrl)
        return complete(invocationId, { status: 'failed', errorClass: 'protocol', beforeAttempt: true });

      // Resolved before the attempt is counted: a vault that is briefly down is retried by
      // Temporal (the failure says whether it may be), and nothing has been sent yet.
      let credentialHeaders: Record<string, string>;
      try {
        credentialHeaders = await deps.credentials.headersFor(row.tenantId, agent.credentialRef);
      } catch (err) {
        if (err instanceof CredentialUnavailable && err.retryable) throw err;
        return complete(invocationId, { status: 'failed', errorClass: 'credential', beforeAttempt: true });
      }
      const body = insertBody
        ? row.requestBody
        : row.requestBodyId
          ? ((await deps.bodies.get(row.tenantId, row.requestBodyId))?.content ?? null)
          : null;

      // Counted only if no other attempt counted one since the load (a zombie attempt whose
      // heartbeat timed out): the loser retries, sees the count, and follows the rule above.
      // The load has counted it already when none of the steps above could stop the call or
      // needed I/O (no credential): the usual case, one statement fewer.
      // A channel payment's call goes only while its channel's lease is its own still (renewed
      // then for the attempt): one that lapsed in the queue and was taken by another call, admitted
      // against the same charged total, would have one voucher ceiling pay for two calls.
      if (!row.leased) {
        const lease = await store.leaseAttempt(invocationId, row.attempts, leaseSeconds);
        if (lease === 'channel_lost')
          return complete(invocationId, { status: 'failed', errorClass: 'payment_lapsed', beforeAttempt: true });
        if (lease === 'taken') throw new InvocationNotPerformed('attempt_leased');
      }

      // A metered call (its maximum recorded at admission) is measured by its agent's meter.
      // An MCP request's answer is watched for its failure, which costs nothing (metered.ts): it
      // goes up under a JSON-RPC id of the gateway's own, and its answer is kept under the
      // caller's (gateway/jsonrpc/own-id.ts).
      const meter = meterOf(agent.pricing);
      const own = meteredRequestUnderOwnId(meter, row.paymentMaxAmount, agent.protocol === 'mcp' ? body : null);
      const metered = meteredCall(meter, row.paymentMaxAmount, 'transactional', undefined, own?.id);
      const heartbeat = setInterval(() => attempt.heartbeat(), 2_000);
      try {
        let reply: UpstreamResponse;
        try {
          reply = await deps.upstream.open({
            url: agent.upstreamUrl,
            // Caller headers already passed the block-list when the row was written; the
            // transactional caller never sees the raw response, so ask for it uncompressed.
            headers: {
              ...row.requestHeaders,
              'accept-encoding': 'identity',
              ...credentialHeaders,
              'x-request-id': row.requestId,
            },
            body: own?.body ?? body ?? undefined,
            deadlineMs: deps.upstreamTimeoutMs,
            deadlineCoversBody: true,
            signal: attempt.signal,
            resendAllowed: agent.retryNonIdempotent,
            tenantId: row.tenantId,
          });
        } catch (err) {
          const errorClass = attempt.endedByWorkflow()
            ? 'workflow_terminated'
            : err instanceof UpstreamError
              ? err.errorClass
              : classifyError(err).errorClass;
          return await complete(invocationId, {
            status: 'failed',
            errorClass,
            // Only a metered call asks whether the request may have reached its upstream.
            ...metered?.complete(failedOutcome(classifyError(err).reached)),
          });
        }

        // Sent under the gateway's own id: an answer the upstream encoded although asked not to
        // is read decoded, as the streaming relay passes it, so that the caller's id is put back
        // (null: an encoding the gateway cannot read, kept as it came).
        const decoded = own ? decodedAnswer(reply.headers, reply.body) : null;
        const read = await readResponse(
          reply,
          decoded ?? reply.body,
          agent.captureBody,
          agent.protocol === 'a2a' ? MAX_A2A_ANSWER : 0,
          metered?.reader ?? null,
          own && decoded ? idRestorer(own.id, own.callerIdText) : null,
        );
        // The charge is known here, once the answer has ended (whole or broken off).
        const charged = metered?.complete({ kind: 'answered', status: reply.status, complete: !read.broken });
        // An A2A answer's task is bound to the agent before the call completes (gateway/a2a/tasks.ts).
        const answered = read.kept ? await bindAnsweredTask(tasks, row, agent.id, read.kept, attempt) : null;
        const latencyMs = Math.round(performance.now() - reply.startedAt);
        const ttftMs = read.firstByteMs ?? reply.ttftMs;
        if (read.broken) {
          const errorClass: ErrorClass = attempt.endedByWorkflow() ? 'workflow_terminated' : read.broken;
          return await complete(invocationId, {
            status: 'failed',
            upstreamStatus: reply.status,
            errorClass,
            latencyMs,
            ttftMs,
            ...charged,
          });
        }
        const contentType = String(reply.headers['content-type'] ?? '') || null;
        const stored = read.captured ? insertBody?.(row.tenantId, contentType, read.captured) : undefined;
        const responseBodyId =
          stored?.id ?? (read.captured ? await deps.bodies.put(row.tenantId, contentType, read.captured) : null);
        return await complete(
          invocationId,
          {
            ...answeredOutcome(reply.status, null),
            latencyMs,
            ttftMs,
            responseBodyId,
            responseContentType: contentType,
            responseSha256: read.sha256,
            a2aTaskId: answered?.taskId,
            a2aContextId: answered?.contextId,
            ...charged,
          },
          stored,
        );
      } finally {
        clearInterval(heartbeat);
      }
    },

    /**
     * Fails the row when perform gave up (its retries exhausted): `credential` when its last
     * failure was an unavailable credential, else the gateway's own (`internal`: a database
     * outage). A row that counts no attempt was never sent: its payment is released (beforeAttempt).
     */
    abandon(invocationId: string, credentialUnavailable: boolean): Promise<InvocationOutcome> {
      return complete(invocationId, {
        status: 'failed',
        errorClass: credentialUnavailable ? 'credential' : 'internal',
        beforeAttempt: true,
      });
    },
  };
}
