// The settlement activities, created from their dependencies (pool, chain provider, gas
// wallet signer, configuration); the facilitator worker registers what this returns. Each
// activity runs its steps in order, and each step is idempotent against the facilitator's
// records, so a retried or replayed activity only does what is still missing.
//
// Fresh reads: the handler's outbox run (below) reads step 1's inputs straight from the request
// in memory (the record and the stored request's state in one query, the account, the chain's
// authorizationState, eth_call simulation and pending nonce, the gas wallet's stored nonce) and
// signs the transfer with the predicted gas nonce while they come. A run of the workflow's
// activity without such a run in this process reads the stored request first.
//
// Steps run by the handler (runFresh, the outbox): for the first request of an authorization,
// the handler runs the steps itself at once, before its workflow is started: the claim check
// and the settlement row (claimed, carrying the signed bytes and gas nonce) are committed in
// one statement before anything is sent, and the workflow (started once the outcome is known,
// or by the sweeper) finishes whatever this process leaves undone. Such a run only works on what it
// claims itself: a record claimed by another run is left to that run and to the workflow.
// The activity, when it comes, waits for a run in progress here (one run per key in this
// process) and takes the outcome of one that finished here; it runs the steps itself only if
// there was none, or it failed. The caller is answered as soon as the inclusion is known; the
// record is written just after (a duplicate meanwhile gets that same answer, from the run here
// or from the record's announcement, and never a second broadcast).
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { getAddress } from 'ethers';
import { type PresignedTransaction } from '../../facilitator/store/claims.ts';
import { storedGasNonce } from '../../facilitator/store/gas.ts';
import {
  completeSettlement,
  findSettlement,
  findSettlementState,
  recordRejected,
  type SettlementRecord,
} from '../../facilitator/store/records.ts';
import { loadSettleRequest, markRefused, type StoredSettleRequest } from '../../facilitator/store/requests.ts';
import { findAccountById, type Account } from '../../facilitator/accounts.ts';
import type { SettleRequest } from '../../x402/schemas.ts';
import { outcomeOfRecord, reverify, type Reverified } from './verify.ts';
import { claim, presign, sign } from './claim.ts';
import { EOA_TRANSFER_GAS_LIMIT } from '../../facilitator/chain.ts';
import { signerKindOf } from '../../x402/verify.ts';
import {
  attemptsOf,
  awaitInclusion,
  broadcast,
  cancelAtGasNonce,
  firstAttempt,
  outcomeOfInclusion,
  recordInclusion,
  signedOrThrow,
  sleep,
  type Signed,
} from './send.ts';
import type { Prepared, SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';
import { errorKind } from '../../lib/error-kind.ts';

const WATCH_WINDOW_MS = 10_000;
/** The most a settle waits for the transfer or its cancel to be mined after the inclusion timeout (the local activity's start-to-close leaves 30 s). */
const MAX_CANCEL_WAIT_MS = 20_000;

/** The wait after the cancel: the rest of the caller's deadline, less a margin for the answer. */
const cancelWaitMs = (settleDeadlineMs: number, inclusionTimeoutMs: number) =>
  Math.min(Math.max(settleDeadlineMs - inclusionTimeoutMs - 500, 1_000), MAX_CANCEL_WAIT_MS);
const WATCH_PAUSE_MS = 2_000;
/** How long a run's outcome is kept for an activity that comes after the run it would have waited for. */
const FINISHED_TTL_MS = 60_000;
const GUARDRAIL_CAUSES = new Set([
  'kind_not_allowed',
  'over_per_transaction_maximum',
  'over_daily_ceiling',
  'over_failed_gas_budget',
]);
/** Before any bytes are signed, `settle` gives up after this long (nothing can be on chain). */
const GIVE_UP_BEFORE_SIGNING_MS = 5 * 60_000;

/** Step 1's reads of one settlement. */
type Reads = {
  /** Fresh reads only: whether a request for the key was stored before this one (then not fresh). */
  storedBefore?: Promise<boolean>;
  stored: Promise<StoredSettleRequest | null>;
  existing: Promise<SettlementRecord | null>;
  checked: Promise<Reverified>;
  account: Promise<Account | null>;
  storedNonce: Promise<number | null>;
  /** The transfer signed ahead with the predicted gas nonce (fresh reads only: signing is CPU, done while waiting too). */
  presigned?: Promise<PresignedTransaction | undefined>;
};

/** The outbox run's reads, started by the handler (which only hands them back to runFresh). */
export type FreshReads = Reads;

/** What a /settle handler in the worker's process may run itself. */
export type SettlementRunner = {
  /**
   * The outbox: runs the steps of a request not stored before, before its workflow is started,
   * and resolves with the outcome as soon as it is known (before the record is written). The
   * claim check is stored with the claim (or the refusal). `stored_before`: a request for the
   * key was stored earlier (a duplicate or a retry): nothing done, the workflow decides. Null:
   * the settlement was claimed by another run, for the caller to wait for its outcome.
   */
  runFresh(
    key: string,
    accountId: string,
    request: SettleRequest,
    inclusionTimeoutMs: number,
    reads?: FreshReads,
  ): Promise<SettlementOutcome | 'stored_before' | null>;
  /**
   * Starts the outbox run's reads (nothing is written): the handler issues them as soon as the
   * request parses, so they travel while it checks readiness and the signature.
   */
  read(key: string, accountId: string, request: SettleRequest): FreshReads;
  /** Runs the steps of a settlement whose workflow this handler just started eagerly; its activity waits for them. */
  runStarted(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome | null>;
};

type PrepareResult = (Prepared | { step: 'elsewhere' } | { step: 'stored_before' }) & { record?: Signed };

/** One run of the steps: its answer (as soon as the outcome is known) and its end (the record written). */
type Run = { answer: Promise<SettlementOutcome | null>; done: Promise<SettlementOutcome | null> };
type Announce = (outcome: SettlementOutcome) => void;

export function createSettlementSteps(deps: SettlementDeps): {
  activities: SettlementActivities;
  runner: SettlementRunner;
} {
  // What this worker just signed and stored, handed to its own delivery step without reading
  // it back; a delivery on another worker (after a crash) reads the record instead.
  const justSigned = new Map<string, Signed>();

  const chainReads = (request: SettleRequest, accountId: string) => ({
    checked: reverify(deps, request),
    account: findAccountById(deps.pool, accountId),
    storedNonce: storedGasNonce(deps.pool, deps.signer.address, deps.config.domain.chainId),
  });

  // One run of the steps per key in this process at a time: the handler's or the activity's,
  // whichever comes first; the other waits for it. (Across processes, the records decide, as
  // for a zombie worker: the UNIQUE claim, the row lock, the stored bytes.)
  const running = new Map<string, Run>();
  // Outcomes of runs that ended here, for the activity that comes after (an inclusion timeout
  // must not be waited for twice, nor stored bytes re-sent by the activity of a finished run).
  const finished = new Map<string, SettlementOutcome>();
  function runOnce(key: string, steps: (announce: Announce) => Promise<SettlementOutcome | null>): Run {
    const current = running.get(key);
    if (current) return current;
    let announce!: Announce;
    const announced = new Promise<SettlementOutcome>((resolve) => {
      announce = resolve;
    });
    const done = steps(announce)
      .then((outcome) => {
        if (outcome) {
          if (finished.size >= 10_000) finished.clear();
          finished.set(key, outcome);
          setTimeout(() => finished.get(key) === outcome && finished.delete(key), FINISHED_TTL_MS).unref();
        }
        return outcome;
      })
      .finally(() => running.get(key) === run && running.delete(key));
    const run: Run = { answer: Promise.race([announced, done]), done };
    run.answer.catch(() => undefined);
    running.set(key, run);
    return run;
  }

  /**
   * The transfer presigned while the chain reads travel: an EOA's transfer has a fixed gas
   * limit, the fees are the oracle's and the nonce is the wallet's stored next one, so it can be
   * signed before the node's pending count is in. Signed again if the reads then predict
   * otherwise (the node's count higher, other fees, a contract wallet's estimate).
   */
  function presignEarly(
    request: SettleRequest,
    chain: ReturnType<typeof chainReads>,
  ): Promise<PresignedTransaction | undefined> {
    const { authorization, signature } = request.paymentPayload.payload;
    // Asked once the reads are out (the signer's kind costs a signature recovery: CPU).
    const early = Promise.all([chain.storedNonce, deps.fees.current()]).then(([nonce, fees]) =>
      nonce === null || signerKindOf(deps.config.domain, authorization, signature) !== 'eoa'
        ? undefined
        : presign(deps, request, { gasLimit: EOA_TRANSFER_GAS_LIMIT, ...fees, chainNonce: nonce }, nonce),
    );
    early.catch(() => undefined);
    return Promise.all([chain.checked, chain.storedNonce, early]).then(([checked, nonce, signed]) => {
      if (!checked.ok) return undefined;
      const { gas } = checked;
      const holds =
        signed &&
        signed.nonce === Math.max(nonce ?? 0, gas.chainNonce) &&
        signed.gasLimit === gas.gasLimit &&
        signed.maxFeePerGas === gas.maxFeePerGas &&
        signed.maxPriorityFeePerGas === gas.maxPriorityFeePerGas;
      // The claim statement checks the prediction against the node's count it was made with.
      return holds ? { ...signed, chainNonce: gas.chainNonce } : presign(deps, request, gas, nonce);
    });
  }

  /** The outbox run's reads: from the request in memory, with the record and the stored request's state in one query. */
  function freshReads(key: string, accountId: string, request: SettleRequest): Reads {
    const state = findSettlementState(deps.pool, key);
    const chain = chainReads(request, accountId);
    const reads: Reads = {
      storedBefore: state.then((s) => s.requestStored),
      stored: Promise.resolve({ accountId, request, refusedCause: null }),
      existing: state.then((s) => s.record),
      ...chain,
      presigned: presignEarly(request, chain),
    };
    for (const read of Object.values(reads)) (read as Promise<unknown>).catch(() => undefined);
    return reads;
  }

  const runner: SettlementRunner = {
    read: freshReads,
    async runFresh(key, accountId, request, inclusionTimeoutMs, early) {
      // Another request of this authorization is being run here: it owns the settlement, and
      // this one is answered as a duplicate, not from its run; once that run is over its request
      // is stored (with its claim or refusal), so the handler can tell whose settlement it is.
      const current = running.get(key);
      if (current) {
        await current.done.catch(() => undefined);
        return 'stored_before';
      }
      let storedBefore = false;
      const outcome = await runOnce(key, async (announce) => {
        const prepared = await prepare(key, early ?? freshReads(key, accountId, request), true);
        storedBefore = prepared.step === 'stored_before';
        return afterPrepare(key, prepared, inclusionTimeoutMs, announce);
      }).answer;
      return storedBefore ? 'stored_before' : outcome;
    },
    runStarted: (key, inclusionTimeoutMs) =>
      runOnce(key, async (announce) =>
        afterPrepare(key, await prepare(key, readsFor(key)), inclusionTimeoutMs, announce),
      ).answer,
  };

  /** The reads of a run without fresh reads: the stored request first, then the chain. */
  function readsFor(key: string): Reads {
    // Sequential on this path: the chain is asked only once the stored request is known.
    const stored = loadSettleRequest(deps.pool, key);
    const later = stored.then((s) => (s ? chainReads(s.request, s.accountId) : null));
    const pick = <T>(f: (r: ReturnType<typeof chainReads>) => Promise<T>, none: T) =>
      later.then((r) => (r ? f(r) : none));
    const reads: Reads = {
      stored,
      existing: findSettlement(deps.pool, key),
      checked: pick((r) => r.checked, { ok: false, cause: 'request_missing' } as Reverified),
      account: pick((r) => r.account, null),
      storedNonce: pick((r) => r.storedNonce, null),
    };
    for (const read of Object.values(reads)) (read as Promise<unknown>).catch(() => undefined);
    return reads;
  }

  /**
   * Re-verify → guardrails and claim → sign and store. Nothing here can reach the chain. `own`
   * (the handler's outbox run): only for a request not stored before, which is stored with its
   * claim (or refusal); a settlement claimed by another run is left to it ('elsewhere').
   */
  async function prepare(key: string, reads: Reads, own = false): Promise<PrepareResult> {
    const [stored, existing, storedBefore] = await Promise.all([reads.stored, reads.existing, reads.storedBefore]);
    if (own && storedBefore) return { step: 'stored_before' };
    if (existing?.status === 'settled' || existing?.status === 'failed')
      return { step: 'final', outcome: outcomeOfRecord(existing) };
    if (own && existing) return { step: 'elsewhere' };
    // A resumed run whose bytes already exist goes straight to delivery: re-verifying now
    // would see its own transaction's effects (a used nonce) as a reason to refuse.
    if (existing?.txHash)
      return { step: 'signed', payer: getAddress(existing.payer), txHash: existing.txHash.toLowerCase() };
    if (!stored) throw new Error('settle request missing for key');
    const authorization = stored.request.paymentPayload.payload.authorization;
    // Lowercased first: a mixed-case address with a bad checksum must not throw here (the
    // signature check, which does not care about case, already passed in the handler).
    const payer = getAddress(authorization.from.toLowerCase());
    // Refused before (a guardrail, or a run that gave up before signing): the same answer, never a fresh claim.
    if (!existing && stored.refusedCause) {
      return GUARDRAIL_CAUSES.has(stored.refusedCause)
        ? { step: 'refused', payer, guardrail: stored.refusedCause as 'over_daily_ceiling' }
        : { step: 'rejected', payer, cause: stored.refusedCause };
    }

    const [checked, account, storedNonce] = await Promise.all([reads.checked, reads.account, reads.storedNonce]);
    if (!checked.ok) {
      // A claimed record (a run resumed after a crash) gives its reservation back.
      if (existing) await completeSettlement(deps.pool, key, { status: 'failed', cause: checked.cause });
      else {
        await recordRejected(deps.pool, {
          key,
          accountId: stored.accountId,
          payer,
          payTo: authorization.to,
          amount: BigInt(authorization.value),
          validBefore: BigInt(authorization.validBefore),
          cause: checked.cause,
          request: own ? stored.request : undefined,
        });
      }
      return { step: 'rejected', payer, cause: checked.cause };
    }
    if (!account) throw new Error('facilitator account missing');
    // A claimed record without bytes (resumed run) is signed under the row lock, never presigned.
    const presigned = existing
      ? undefined
      : await (reads.presigned ?? presign(deps, stored.request, checked.gas, storedNonce));
    // A claimed record keeps its claim and reservation: claiming again would meet the daily
    // ceiling first and, with the ceiling full, refuse the very settlement it already holds.
    const claimed = existing
      ? { claimed: existing }
      : await claim(deps, key, account, stored.request, checked.transfer, checked.gas, presigned, own);
    if ('rejected' in claimed) return { step: 'refused', payer, guardrail: claimed.rejected };
    if (own && claimed.raced) return { step: 'elsewhere' };
    const signed = claimed.claimed.rawTx ? claimed.claimed : await sign(deps, key, stored.request, checked.gas);
    return { step: 'signed', payer, txHash: signed.txHash!.toLowerCase(), record: signedOrThrow(signed) };
  }

  /**
   * Broadcast → first-block inclusion → record. Only ever sends stored bytes. A mined outcome
   * is announced (to the waiting caller) before the record is written. Unmined at the
   * inclusion timeout: the transfer is replaced by a cancel at its gas nonce, and whichever of
   * the two is mined within the rest of the caller's deadline decides; neither yet: `pending`
   * (the caller is told to retry; the watcher records the outcome when one is mined).
   */
  async function deliver(
    key: string,
    inclusionTimeoutMs: number,
    justNow?: Signed,
    announce?: Announce,
  ): Promise<SettlementOutcome> {
    const record = signedOrThrow(justNow ?? (await findSettlement(deps.pool, key)));
    if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
    const attempts = justNow ? firstAttempt(record) : await attemptsOf(deps, record);
    const sent = await broadcast(deps, record);
    let inclusion = sent ?? (await awaitInclusion(deps, record, attempts, Date.now() + inclusionTimeoutMs));
    if (!inclusion.mined) {
      const watched = await cancelAtGasNonce(deps, record);
      inclusion = await awaitInclusion(
        deps,
        record,
        watched,
        Date.now() + cancelWaitMs(deps.config.settleDeadlineMs, inclusionTimeoutMs),
      );
    }
    if (inclusion.mined && !inclusion.cancelled) announce?.(outcomeOfInclusion(record, inclusion));
    return recordInclusion(deps, record, inclusion);
  }

  /** Whether giving up is safe: no signed bytes exist (a read that fails says "not sure"). */
  async function nothingSigned(key: string): Promise<boolean> {
    const record = await findSettlement(deps.pool, key).catch(() => undefined);
    return record !== undefined && !record?.rawTx;
  }

  /** The outcome of a prepared settlement: its answer, or the delivery of its signed bytes. */
  function afterPrepare(
    key: string,
    prepared: PrepareResult,
    inclusionTimeoutMs: number,
    announce?: Announce,
  ): Promise<SettlementOutcome | null> | SettlementOutcome | null {
    switch (prepared.step) {
      case 'elsewhere':
      case 'stored_before':
        return null;
      case 'final':
        return prepared.outcome;
      case 'rejected':
        return { status: 'failed', payer: prepared.payer, transaction: null, cause: prepared.cause };
      case 'refused':
        return { status: 'rejected', payer: prepared.payer, transaction: null, cause: prepared.guardrail };
    }
    return deliver(key, inclusionTimeoutMs, prepared.record, announce);
  }

  /** One attempt of the activity: every step, giving up only before anything is signed. */
  async function attempt(
    key: string,
    inclusionTimeoutMs: number,
    announce: Announce,
  ): Promise<SettlementOutcome | null> {
    let prepared: PrepareResult;
    try {
      prepared = await prepare(key, readsFor(key));
    } catch (err) {
      // Verification, claim or signing cannot complete (database or RPC outage): after five
      // minutes, a plain failure, but only when nothing was signed (else keep retrying: the
      // bytes must be delivered, or their gas nonce would stall the wallet).
      const { scheduledTimestampMs } = Context.current().info;
      if (Date.now() - scheduledTimestampMs < GIVE_UP_BEFORE_SIGNING_MS || !(await nothingSigned(key))) throw err;
      // Durable before it is given: a /settle of this authorization later (whose handler may
      // run the steps before its workflow start is acknowledged) answers it instead of claiming.
      await markRefused(deps.pool, key, 'unavailable').catch(() => {
        throw err;
      });
      return { status: 'failed', payer: '', transaction: null, cause: 'unavailable' };
    }
    return afterPrepare(key, prepared, inclusionTimeoutMs, announce);
  }

  const activities: SettlementActivities = {
    /**
     * Every step, in one local activity: one workflow task, no gap between the steps. When the
     * /settle handler in this process already runs them (runNow), this waits for that run's
     * outcome; if that run fails, this attempt runs the steps itself, with the activity's
     * retries and its give-up rule.
     */
    async settle(key, inclusionTimeoutMs): Promise<SettlementOutcome> {
      const ended = finished.get(key);
      if (ended) return ended;
      const handed = running.get(key);
      const outcome = handed ? await handed.done.catch(() => null) : null;
      if (outcome) return outcome;
      const own = await runOnce(key, (announce) => attempt(key, inclusionTimeoutMs, announce)).done;
      // Only the handler's outbox run leaves a settlement to others; an activity's run finishes it.
      if (!own) throw new Error('settlement run ended without an outcome');
      return own;
    },

    async prepareSettlement(key): Promise<Prepared> {
      const { record, ...prepared } = (await prepare(key, readsFor(key))) as Prepared & { record?: Signed };
      if (record) {
        if (justSigned.size >= 10_000) justSigned.clear();
        justSigned.set(key, record);
      }
      return prepared as Prepared;
    },

    async deliverSettlement(key, inclusionTimeoutMs): Promise<SettlementOutcome> {
      const cached = justSigned.get(key);
      justSigned.delete(key);
      return deliver(key, inclusionTimeoutMs, cached);
    },

    /**
     * After an inclusion timeout: keeps watching (re-sending the latest bytes, bumping fees)
     * until one attempt is mined, then records the real outcome. A mined transaction is final
     * either way, even a revert, so this ends once the gas wallet can pay for it.
     */
    async watchSettlement(key): Promise<SettlementOutcome> {
      const found = signedOrThrow(await findSettlement(deps.pool, key));
      if (found.status === 'settled' || found.status === 'failed') return outcomeOfRecord(found);
      const context = Context.current();
      for (;;) {
        const record = signedOrThrow(await findSettlement(deps.pool, key));
        const inclusion = await awaitInclusion(
          deps,
          record,
          await attemptsOf(deps, record),
          Date.now() + WATCH_WINDOW_MS,
          () => context.heartbeat(),
        );
        if (inclusion.mined) {
          // A mined cancel stays pending until the chain is past the authorization's validBefore.
          const outcome = await recordInclusion(deps, record, inclusion);
          if (outcome.status !== 'pending') return outcome;
        }
        context.heartbeat();
        await sleep(WATCH_PAUSE_MS);
      }
    },
  };
  return { activities: withCoarseFailures(activities), runner };
}

/**
 * What leaves an activity as a failure reaches the workflow history, the SDK's log and, with
 * tracing on, a span: every failure is replaced at this boundary by one that names only its
 * kind (error-kind.ts); the retry decision is kept.
 */
function withCoarseFailures(activities: SettlementActivities): SettlementActivities {
  const coarse = (err: unknown): ApplicationFailure => {
    const type = err instanceof ApplicationFailure ? (err.type ?? 'Error') : (err as Error)?.name || 'Error';
    const message = errorKind(err, type);
    return err instanceof ApplicationFailure && err.nonRetryable
      ? ApplicationFailure.nonRetryable(message, type)
      : ApplicationFailure.retryable(message, type);
  };
  return Object.fromEntries(
    Object.entries(activities).map(([name, run]) => [
      name,
      async (...args: unknown[]) => {
        try {
          return await (run as (...a: unknown[]) => Promise<unknown>)(...args);
        } catch (err) {
          throw coarse(err);
        }
      },
    ]),
  ) as unknown as SettlementActivities;
}

export type { SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';
