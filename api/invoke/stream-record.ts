// A streaming call's row: written beside the call, never on its latency path
// (gateway/invocations/stream-records.ts queues it, group-committed), and completed at the end
// with its outcome, its bodies' digests and, with emit_receipts, its receipt, signed as it
// completes and stored in the completion's statement (row and receipt commit together). A paid
// call's row is the exception: it is written, with its payment bound, before anything is
// forwarded (bindPayment), or, a voucher on a channel this process holds, as it is forwarded and
// before any of its answer is sent (writeAsForwarded).
import type { Readable } from 'node:stream';
import {
  completionRecord,
  type Completion,
  type CompletedRow,
  type StartedRow,
} from '../../gateway/invocations/stream-records.ts';
import type { Invocation } from '../../gateway/db/entities.ts';
import type { ErrorClass } from '../../gateway/upstream/errors.ts';
import { countIssued, type SignedReceipt } from '../../gateway/receipts/signer.ts';
import { closeUnforwarded } from '../../gateway/invocations/stale-streams.ts';
import { insertBindingPayment, paidRowStatement } from '../../gateway/payment/binding.ts';
import { streamEndsBy } from '../../gateway/invocations/metered.ts';
import { recordUpstreamOutcome } from '../../gateway/metrics.ts';
import { errorKind } from '../../lib/error-kind.ts';
import { stillSettling, withPaymentRequired } from '../payment/stage.ts';
import { digestOfEmitted, digestingBody, type BodyDigest } from '../proxy/digest.ts';
import { recordedCallFields, type ProxyCall } from '../proxy/call.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import type { WorkflowHandle } from '@temporalio/client';
import { settledWithin, startMeteredCharge, type SettledCharge } from '../../temporal/charge-start.ts';
import {
  commitChannelCharge,
  completeAndCommitChannelCharge,
  type CommittedCharge,
  LEASE_RENEW_EVERY_MS,
  LEASE_SECONDS,
  releaseChannelLease,
  renewChannelLeases,
} from '../../gateway/payment/channels/store.ts';
import { noteChannelCommit } from '../../gateway/payment/channels/local-releases.ts';

export type Outcome = Omit<Completion, 'id'>;

export type StreamRecord = {
  row: StartedRow;
  /** The caller's body to send up: with emit_receipts, one that is hashed as it goes. */
  hashRequest(body: Buffer | Readable): Buffer | Readable;
  /** Hashes the answer as it is piped down (emit_receipts); `finish` says whether it passed whole. */
  hashResponse(source: Readable): { finish(complete: boolean): void };
  /** Writes the row beside the call; a paid call's row is written already (bindPayment, writeAsForwarded). */
  start(): void;
  /**
   * A call paid on a channel this process holds (its payment's `channel.turn`): writes its row,
   * owned and counted as forwarded, with its payment's binding, sent now; the call is forwarded
   * meanwhile and answered only once this resolves (rejects: nothing written, nothing charged).
   * The completion waits for it.
   */
  writeAsForwarded(): Promise<void>;
  /**
   * After writeAsForwarded: whether the voucher's signature holds (its check left to now, while
   * the row's write is in flight). False: the row and binding are taken back, the turn ended,
   * nothing charged.
   */
  signatureHolds(): Promise<boolean>;
  /** Whether writeAsForwarded's write has failed already (nothing to forward the call for). */
  writeFailed(): boolean;
  /** Ends a held channel's turn if the call never completed (nothing charged); idempotent. */
  release(): void;
  /** Completes the row (signing its receipt first); waits for the signature, never for the write. */
  complete(outcome: Outcome): Promise<void>;
  /**
   * After writeAsForwarded's write failed once the call was forwarded (its answer dropped, nothing
   * charged): the call is recorded unpaid, failed `internal`, so that what its upstream was asked
   * to do is on record. Never throws (a database still failing leaves it unrecorded, logged).
   */
  recordUnanswered(): void;
  /**
   * A metered paid call's charge, settled by its workflow (started once the completion commits),
   * when it settles within `withinMs`; null otherwise, and for every other call.
   */
  settledCharge(withinMs: number): Promise<SettledCharge | null>;
};

function startedRow(call: ProxyCall): StartedRow {
  return {
    id: call.invocationId,
    tenantId: call.caller.tenantId,
    agentId: call.agent.id,
    status: 'running',
    requestId: call.requestId,
    caller: call.caller.userId,
    callerKind: call.caller.kind,
    model: call.model,
    contentType: call.contentType,
    requestBytes: call.bodyBytes,
    ...recordedCallFields(call),
    createdAt: new Date(),
  };
}

/** A call that failed before any upstream byte: no status, no timings. */
export function failedBeforeUpstream(errorClass: ErrorClass): Outcome {
  return {
    status: 'failed',
    errorClass,
    upstreamStatus: null,
    latencyMs: null,
    ttftMs: null,
    responseContentType: null,
  };
}

/** The longest a streamed answer renews its channel's hold (a bound on a timer whose completion never came). */
const RENEW_AT_MOST_MS = 6 * 3_600_000;

export function streamRecord(deps: AppDeps, services: ProxyParts, call: ProxyCall): StreamRecord {
  const row = startedRow(call);
  // A metered paid call is charged after it completes, by a workflow that then signs its
  // receipt (the receipt names the charge and its transaction).
  const charged = row.paymentScheme != null && row.paymentNonce != null;
  // Its bodies are hashed as any receipt-emitting call's are; only the signing moves.
  const receipts = call.agent.emitReceipts;
  const signsHere = receipts && !charged;
  let chargeStarted: Promise<WorkflowHandle> | null = null;
  // A channel payment holds its channel until its charge is committed: the hold is renewed from
  // the moment the call is bound (its request may still be arriving, as slowly as the caller
  // sends it, and its answer may run far longer than the lease) to the completion, and lapses if
  // this process dies (or after RENEW_AT_MOST_MS, whatever happens). A lease that lapsed while its
  // call still ran would let the same voucher ceiling buy a second call.
  const channel = call.payment?.channel;
  let renewal: NodeJS.Timeout | null = null;
  // A held channel's lease is renewed by its holder (owners.ts).
  const turn = channel?.turn ?? null;
  const owners = services.payment.owners;
  let written: Promise<boolean> | null = null;
  let failed = false;
  let finished = false;
  const release = () => {
    if (turn && !finished) {
      finished = true;
      owners?.abandon(channel!.id, turn.call);
    }
  };
  const renewWhileStreaming = () => {
    if (!channel || turn || renewal) return;
    const until = Date.now() + RENEW_AT_MOST_MS;
    const renew = () =>
      void renewChannelLeases(deps.orm, [{ id: channel.id, token: channel.leaseToken }], LEASE_SECONDS).catch(
        () => undefined,
      );
    // Renewed at once too: the admission may have spent most of the lease (a deposit is answered
    // up to 20 s before it could lapse, channels/store.ts settleDeadlineUnderLease).
    renew();
    renewal = setInterval(() => {
      if (Date.now() > until && renewal) clearInterval(renewal);
      else renew();
    }, LEASE_RENEW_EVERY_MS);
    renewal.unref();
  };
  let request: BodyDigest | null = null;
  let response: BodyDigest | null = null;
  // By kind: a database error may quote the row's values (lib/error-kind.ts).
  const logFailure = (err: unknown) =>
    deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not record streaming invocation');
  return {
    row,
    hashRequest(body) {
      // Bound (or written) and about to be forwarded: its channel's lease is renewed from now.
      renewWhileStreaming();
      if (!receipts) return body;
      const hashed = digestingBody(body);
      request = hashed.digest;
      return hashed.body;
    },
    hashResponse(source) {
      renewWhileStreaming();
      if (!receipts) return { finish: () => undefined };
      const hashed = digestOfEmitted(source);
      response = hashed;
      return hashed;
    },
    // Sent within stream-records.ts's START_DELAY_MS with the starts of other calls, or replaced
    // by the whole row if the call ends first, and not waited for (holding the head until it
    // was sent cost c=1 throughput; docs/PROXY.md).
    start: () => void services.recorder.start(row).catch(logFailure),
    writeAsForwarded() {
      const payment = call.payment!;
      // Sent before this returns (row-session.ts): PostgreSQL writes it while the caller goes on.
      const write = services.recorder
        .insertWith(row, (rowInsert) =>
          paidRowStatement(
            rowInsert,
            row.id,
            {
              network: payment.network,
              asset: payment.asset,
              payer: payment.payer,
              nonce: payment.nonce,
              tenantId: row.tenantId,
              agentId: row.agentId,
              amount: payment.amount,
              signedPayment: turn!.signedPayment,
            },
            { channelId: channel!.id, token: channel!.leaseToken },
          ),
        )
        .then((rows) => {
          if (rows === 1) return;
          // Fenced out: the lease is no longer this process's hold (owners.ts ends the hold).
          owners?.lost(channel!.id, channel!.leaseToken);
          throw new Error('channel_hold_lost');
        });
      written = write.then(
        () => true,
        (err: unknown) => {
          failed = true;
          deps.log.warn({ invocationId: row.id, err: errorKind(err) }, 'could not write a paid stream');
          return false;
        },
      );
      return write;
    },
    writeFailed: () => failed,
    async signatureHolds() {
      const check = turn?.signed;
      if (!check || (await check().catch(() => false))) return true;
      release();
      if (written && (await written)) await unwriteRow(deps, row.id);
      return false;
    },
    release,
    async complete(outcome) {
      if (renewal) clearInterval(renewal);
      recordUpstreamOutcome('streaming', outcome.errorClass, outcome.latencyMs);
      const done = {
        ...row,
        ...outcome,
        // What a metered call's payment comes to is its charge (the maximum stays beside it).
        ...(row.paymentScheme && outcome.paymentCharge != null ? { paymentAmount: outcome.paymentCharge } : {}),
        completedAt: new Date(),
        requestSha256: request?.value() ?? null,
        responseSha256: response?.value() ?? null,
        receipt: null as SignedReceipt | null,
      };
      if (signsHere) {
        done.receipt = await services.signReceipt(done).catch((err: unknown) => {
          deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not sign streaming receipt');
          return null;
        });
      }
      if (turn && written && !(await written)) {
        // Its row was never written: nothing to complete, nothing charged.
        release();
        return;
      }
      if (turn && owners && !finished) {
        // On a held channel the turn ends now, the held state moved on by the charge, and the
        // charge's write follows the channel's earlier ones (owners.ts). With none pending the
        // row's completion shares the charge's statement; behind others it goes at once, so a
        // process lost meanwhile leaves the row completed for the due-charges round to charge.
        // Its receipt, if any, is signed with its charge, not here.
        finished = true;
        const completed = owners.committing(channel!.id) ? services.recorder.complete(done, true) : null;
        completed?.catch(logFailure);
        owners.finish(channel!.id, turn.call, BigInt(done.paymentCharge ?? '0'), (keep) =>
          completed
            ? completed.then(() => commitChannelCharge(services.statements, row.id, keep))
            : completeHeldCall(deps, services, done, keep),
        );
        return;
      }
      // A channel payment's row goes at once: the payer's next call waits for its channel.
      const committed = services.recorder.complete(done, !!row.paymentChannel);
      committed.then(() => {
        if (done.receipt) countIssued(done.receipt);
      }, logFailure);
      if (charged && row.paymentChannel) {
        // A channel payment's charge is committed here, as the row completes, so the payer's
        // next call finds its channel free and its charged total current; a commit that fails
        // is left to the due-charges round.
        const commit = committed.then(() => commitChannelCharge(services.statements, row.id));
        noteChannelCommit(row.paymentChannel, commit);
        commit.catch((err: unknown) =>
          deps.log.warn({ invocationId: row.id, err: errorKind(err) }, 'could not commit a channel charge'),
        );
      } else if (charged) {
        // Not started (this process dies, Temporal is down): the due-charges round starts it.
        chargeStarted = committed.then(() =>
          startMeteredCharge(
            deps.temporal,
            deps.config.temporal.taskQueue,
            { invocationId: row.id, tenantId: row.tenantId, agent: call.agent },
            deps.config.workflowStartDeadlineMs,
          ),
        );
        chargeStarted.catch((err: unknown) =>
          deps.log.warn({ invocationId: row.id, err: errorKind(err) }, 'could not start a metered charge'),
        );
      }
    },
    recordUnanswered() {
      recordUpstreamOutcome('streaming', 'internal', null);
      const done = {
        ...row,
        // The call's fields as an unpriced call's: no payment of it is on record.
        ...recordedCallFields({ ...call, payment: null, price: null }),
        ...failedBeforeUpstream('internal'),
        completedAt: new Date(),
        requestSha256: null,
        responseSha256: null,
        receipt: null,
      };
      services.recorder.complete(done, true).catch(logFailure);
    },
    async settledCharge(withinMs) {
      if (!chargeStarted) return null;
      // One deadline for the whole wait: the completion's commit, the start and the settle.
      const until = Date.now() + withinMs;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), withinMs)));
      const handle = await Promise.race([chargeStarted.catch(() => null), late]).finally(() => clearTimeout(timer));
      return handle ? settledWithin(deps.temporal, handle, until - Date.now()) : null;
    },
  };
}

/**
 * A held channel's call completed and its charge committed, in one statement; when that could
 * not complete the row as it expected (or failed), the row is completed as any other (its
 * writes retried) and the charge committed after it, or else by the due-charges round.
 */
async function completeHeldCall(
  deps: AppDeps,
  services: ProxyParts,
  done: CompletedRow,
  keep: boolean,
): Promise<CommittedCharge> {
  const both = await completeAndCommitChannelCharge(services.statements, completionRecord(done), keep).catch(
    (err: unknown) => {
      deps.log.warn({ invocationId: done.id, err: errorKind(err) }, 'could not complete a held call with its charge');
      return null;
    },
  );
  if (both?.recorded) return both;
  await services.recorder.complete(done, true);
  return commitChannelCharge(services.statements, done.id, keep);
}

/** Takes back a paid stream's row and binding, written before its voucher's signature was found bad (never forwarded). */
async function unwriteRow(deps: AppDeps, invocationId: string): Promise<void> {
  await deps.orm.em
    .getConnection()
    .execute(
      `with gone as (delete from invocations where id = ? and status = 'running' returning id)
       delete from payment_claims where invocation_id in (select id from gone)`,
      [invocationId],
    )
    .catch((err: unknown) =>
      deps.log.error({ invocationId, err: errorKind(err) }, 'could not take back an unpaid stream row'),
    );
}

/**
 * A paid call binds its payment to its row, in one transaction, before anything is forwarded
 * (402 if already bound): an unbound payment would let the same payment header buy another call.
 * The row is inserted counting no attempt and forwarded only once its forwarding mark (owner
 * and attempt) has committed: a process lost in between leaves a row known never to have
 * reached the upstream, whose payment the lost-stream sweep releases. A mark that fails, or
 * finds the row already closed by that sweep, forwards nothing: the payment is released and
 * the payer told to resend the same header. The mark is waited for STREAM_MARK_DEADLINE_MS.
 */
export async function bindPayment(
  deps: AppDeps,
  services: ProxyParts,
  call: ProxyCall,
  row: StartedRow,
): Promise<void> {
  try {
    await insertBindingPayment(
      deps.orm,
      {
        ...row,
        mode: 'streaming',
        attempts: 0,
        requestHeaders: {},
        updatedAt: row.createdAt,
        // A metered answer's end: its row is closed by the lost-stream sweep past it, whatever its process does.
        streamEndsBy: row.paymentScheme ? streamEndsBy(call.payment?.chargeBy) : null,
      } as Invocation,
      call.payment!,
    );
  } catch (err) {
    // Not bound, never served: a channel payment's hold on its channel goes (nothing is charged).
    await releaseChannelLease(deps.orm, call.payment?.channel);
    throw withPaymentRequired(deps, call, err);
  }
  let timer: NodeJS.Timeout | undefined;
  const marked = await Promise.race([
    services.recorder.markForwarding(row.id),
    new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), deps.config.streamMarkDeadlineMs))),
  ]).catch((err: unknown) => {
    deps.log.warn({ invocationId: row.id, err: errorKind(err) }, 'could not mark a paid stream forwarding');
    return false;
  });
  clearTimeout(timer);
  if (marked) return;
  await closeUnforwarded(deps.orm, row.id).catch((err: unknown) =>
    deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not release an unforwarded payment'),
  );
  throw stillSettling();
}
