// The settlement activities, created from their dependencies (pool, chain provider, gas
// wallet signer, configuration); the facilitator worker registers what this returns. Each
// activity runs its steps in order, and each step is idempotent against the facilitator's
// records, so a retried or replayed activity only does what is still missing.
//
// Prefetch: a worker embedded in the /settle process is handed the request once the handler
// has checked the signature, and starts the reads of step 1 (the record, the account, the chain's
// authorizationState, eth_call simulation and pending nonce, the gas wallet's stored nonce)
// right away, while the claim check is written and the workflow start travels to Temporal and
// back. The activity then judges those reads exactly as it judges its own: only the I/O
// started earlier. A prefetch is used
// once, by the first attempt that finds it within PREFETCH_TTL_MS; a retry, or a worker in
// another process, reads everything itself.
//
// Steps run by the handler (runNow): once that handler's workflow start is acknowledged with
// its eager task (so the run exists, and its activity will run in this process), the handler
// runs the steps itself at once, and the activity, when it comes, waits for that run's outcome
// (one run per key in this process), running the steps itself only if that run failed.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { getAddress } from 'ethers';
import { completeSettlement, findSettlement, loadSettleRequest, recordRejected, storedGasNonce, type PresignedTransaction, type SettlementRecord } from '../../facilitator/store.ts';
import { findAccountById, type Account } from '../../facilitator/accounts.ts';
import type { SettleRequest } from '../../facilitator/x402/schemas.ts';
import { outcomeOfRecord, reverify, type Reverified } from './verify.ts';
import { claim, presign, sign } from './claim.ts';
import { attemptsOf, awaitInclusion, broadcast, firstAttempt, recordInclusion, signedOrThrow, sleep, type Signed } from './send.ts';
import type { Prepared, SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';

const WATCH_WINDOW_MS = 10_000;
const WATCH_PAUSE_MS = 2_000;
const PREFETCH_TTL_MS = 5_000;
/** Before any bytes are signed, `settle` gives up after this long (nothing can be on chain). */
const GIVE_UP_BEFORE_SIGNING_MS = 5 * 60_000;

/** Step 1's reads of one settlement, started early (see the top of this file). */
type Reads = {
  stored: Promise<{ accountId: string; request: SettleRequest } | null>;
  existing: Promise<SettlementRecord | null>;
  checked: Promise<Reverified>;
  account: Promise<Account | null>;
  storedNonce: Promise<number | null>;
  /** The transfer signed ahead with the predicted gas nonce (prefetch only: signing is CPU, done while waiting too). */
  presigned?: Promise<PresignedTransaction | undefined>;
};

export type SettlementPrefetch = ((key: string, accountId: string, request: SettleRequest, saved: Promise<void>) => void) & {
  /**
   * Runs the settlement's steps now, in the /settle handler, once its workflow run exists (the
   * start acknowledged); the run's activity in this process waits for them (see `settle`).
   */
  runNow?: (key: string, inclusionTimeoutMs: number) => Promise<SettlementOutcome>;
};

type PrepareResult = Prepared & { record?: Signed };

export function createSettlementSteps(deps: SettlementDeps): { activities: SettlementActivities; prefetch: SettlementPrefetch } {
  // What this worker just signed and stored, handed to its own delivery step without reading
  // it back; a delivery on another worker (after a crash) reads the record instead.
  const justSigned = new Map<string, Signed>();
  const prefetched = new Map<string, Reads>();

  const chainReads = (request: SettleRequest, accountId: string) => ({
    checked: reverify(deps, request),
    account: findAccountById(deps.pool, accountId),
    storedNonce: storedGasNonce(deps.pool, deps.signer.address, deps.config.domain.chainId),
  });

  // One run of the steps per key in this process at a time: the handler's or the activity's,
  // whichever comes first; the other waits for it. (Across processes, the records decide, as
  // for a zombie worker: the UNIQUE claim, the row lock, the stored bytes.)
  const running = new Map<string, Promise<SettlementOutcome>>();
  function runOnce(key: string, run: () => Promise<SettlementOutcome>): Promise<SettlementOutcome> {
    const current = running.get(key);
    if (current) return current;
    const started = run().finally(() => running.get(key) === started && running.delete(key));
    running.set(key, started);
    return started;
  }

  const prefetch: SettlementPrefetch = (key, accountId, request, saved) => {
    if (prefetched.has(key) || prefetched.size >= 1_000) return;
    const chain = chainReads(request, accountId);
    const reads: Reads = {
      // The request is used from memory, but only once the handler has stored it (claim check).
      stored: saved.then(() => ({ accountId, request })),
      existing: findSettlement(deps.pool, key),
      ...chain,
      presigned: Promise.all([chain.checked, chain.storedNonce]).then(([checked, nonce]) => (checked.ok ? presign(deps, request, checked.gas, nonce) : undefined)),
    };
    for (const read of Object.values(reads)) (read as Promise<unknown>).catch(() => undefined);
    prefetched.set(key, reads);
    // The claim check was not written (the handler answers 503): a retry prefetches afresh.
    saved.catch(() => prefetched.get(key) === reads && prefetched.delete(key));
    setTimeout(() => prefetched.get(key) === reads && prefetched.delete(key), PREFETCH_TTL_MS).unref();
  };

  prefetch.runNow = (key, inclusionTimeoutMs) => runOnce(key, async () => afterPrepare(key, await prepare(key), inclusionTimeoutMs));

  function readsFor(key: string): Reads {
    const early = prefetched.get(key);
    if (early) {
      prefetched.delete(key);
      return early;
    }
    // Sequential on this path: the chain is asked only once the stored request is known.
    const stored = loadSettleRequest(deps.pool, key);
    const later = stored.then((s) => (s ? chainReads(s.request, s.accountId) : null));
    const pick = <T>(f: (r: ReturnType<typeof chainReads>) => Promise<T>, none: T) => later.then((r) => (r ? f(r) : none));
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

  /** Re-verify → guardrails and claim → sign and store. Nothing here can reach the chain. */
  async function prepare(key: string): Promise<PrepareResult> {
    const reads = readsFor(key);
    const [stored, existing] = await Promise.all([reads.stored, reads.existing]);
    if (existing?.status === 'settled' || existing?.status === 'failed') return { step: 'final', outcome: outcomeOfRecord(existing) };
    // A resumed run whose bytes already exist goes straight to delivery: re-verifying now
    // would see its own transaction's effects (a used nonce) as a reason to refuse.
    if (existing?.txHash) return { step: 'signed', payer: getAddress(existing.payer), txHash: existing.txHash };
    if (!stored) throw new Error('settle request missing for key');
    const authorization = stored.request.paymentPayload.payload.authorization;
    // Lowercased first: a mixed-case address with a bad checksum must not throw here (the
    // signature check, which does not care about case, already passed in the handler).
    const payer = getAddress(authorization.from.toLowerCase());

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
        });
      }
      return { step: 'rejected', payer, cause: checked.cause };
    }
    if (!account) throw new Error('facilitator account missing');
    // A claimed record without bytes (resumed run) is signed under the row lock, never presigned.
    const presigned = existing ? undefined : await (reads.presigned ?? presign(deps, stored.request, checked.gas, storedNonce));
    // A claimed record keeps its claim and reservation: claiming again would meet the daily
    // ceiling first and, with the ceiling full, refuse the very settlement it already holds.
    const claimed = existing ? { claimed: existing } : await claim(deps, key, account, stored.request, checked.transfer, presigned);
    if ('rejected' in claimed) return { step: 'refused', payer, guardrail: claimed.rejected };
    const signed = claimed.claimed.rawTx ? claimed.claimed : await sign(deps, key, stored.request, checked.gas);
    return { step: 'signed', payer, txHash: signed.txHash!, record: signedOrThrow(signed) };
  }

  /** Broadcast → first-block inclusion → record. Only ever sends stored bytes. */
  async function deliver(key: string, inclusionTimeoutMs: number, justNow?: Signed): Promise<SettlementOutcome> {
    const record = signedOrThrow(justNow ?? (await findSettlement(deps.pool, key)));
    if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
    const attempts = justNow ? firstAttempt(record) : await attemptsOf(deps, record);
    const sent = await broadcast(deps, record);
    const inclusion = sent ?? (await awaitInclusion(deps, record, attempts, Date.now() + inclusionTimeoutMs));
    return recordInclusion(deps, key, inclusion);
  }

  /** Whether giving up is safe: no signed bytes exist (a read that fails says "not sure"). */
  async function nothingSigned(key: string): Promise<boolean> {
    const record = await findSettlement(deps.pool, key).catch(() => undefined);
    return record !== undefined && !record?.rawTx;
  }

  /** The outcome of a prepared settlement: its answer, or the delivery of its signed bytes. */
  function afterPrepare(key: string, prepared: PrepareResult, inclusionTimeoutMs: number): Promise<SettlementOutcome> | SettlementOutcome {
    switch (prepared.step) {
      case 'final':
        return prepared.outcome;
      case 'rejected':
        return { status: 'failed', payer: prepared.payer, transaction: null, cause: prepared.cause };
      case 'refused':
        return { status: 'rejected', payer: prepared.payer, transaction: null, cause: prepared.guardrail };
    }
    return deliver(key, inclusionTimeoutMs, prepared.record);
  }

  /** One attempt of the activity: every step, giving up only before anything is signed. */
  async function attempt(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome> {
    let prepared: PrepareResult;
    try {
      prepared = await prepare(key);
    } catch (err) {
      // Verification, claim or signing cannot complete (database or RPC outage): after five
      // minutes, a plain failure, but only when nothing was signed (else keep retrying: the
      // bytes must be delivered, or their gas nonce would stall the wallet).
      const { scheduledTimestampMs } = Context.current().info;
      if (Date.now() - scheduledTimestampMs < GIVE_UP_BEFORE_SIGNING_MS || !(await nothingSigned(key))) throw err;
      return { status: 'failed', payer: '', transaction: null, cause: 'unavailable' };
    }
    return afterPrepare(key, prepared, inclusionTimeoutMs);
  }

  const activities: SettlementActivities = {
    /**
     * Every step, in one local activity: one workflow task, no gap between the steps. When the
     * /settle handler in this process already runs them (runNow), this waits for that run's
     * outcome; if that run fails, this attempt runs the steps itself, with the activity's
     * retries and its give-up rule.
     */
    async settle(key, inclusionTimeoutMs): Promise<SettlementOutcome> {
      const handed = running.get(key);
      const outcome = handed ? await handed.catch(() => null) : null;
      return outcome ?? runOnce(key, () => attempt(key, inclusionTimeoutMs));
    },

    async prepareSettlement(key): Promise<Prepared> {
      const { record, ...prepared } = await prepare(key);
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
        const inclusion = await awaitInclusion(deps, record, await attemptsOf(deps, record), Date.now() + WATCH_WINDOW_MS, () => context.heartbeat());
        if (inclusion.mined) return recordInclusion(deps, key, inclusion);
        context.heartbeat();
        await sleep(WATCH_PAUSE_MS);
      }
    },
  };
  return { activities: withCoarseFailures(activities), prefetch };
}

/**
 * What leaves an activity as a failure reaches the workflow history, the SDK's log and, with
 * tracing on, a span. Errors from the RPC client quote the request they failed on (ethers puts
 * the JSON-RPC payload in the message: calldata carrying the payment signature, or the signed
 * transaction), so every failure is replaced at this boundary by one that names only its kind;
 * the retry decision is kept.
 */
function withCoarseFailures(activities: SettlementActivities): SettlementActivities {
  const coarse = (err: unknown): ApplicationFailure => {
    const kind = (err as { code?: unknown })?.code;
    const type = err instanceof ApplicationFailure ? (err.type ?? 'Error') : (err as Error)?.name || 'Error';
    const message = typeof kind === 'string' ? `${type}: ${kind}` : type;
    return err instanceof ApplicationFailure && err.nonRetryable ? ApplicationFailure.nonRetryable(message, type) : ApplicationFailure.retryable(message, type);
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
