// The steps of one settlement as plain functions over the facilitator's records and the chain,
// numbered as SettlementWorkflow runs them: 1 verify → 2 reserve (guardrails, the nonce
// reservation, the transfer signed and stored) → 3 broadcast → 4 confirm (first-block
// inclusion, the cancel after the inclusion timeout, the record); and the watch after a confirm
// left `pending`. Each step is idempotent against the records (the UNIQUE settlement row, the
// stored bytes with their gas nonce), so a step retried, or run again on another worker after
// a crash, redoes only what is missing and can only ever send the one stored transaction.
// The steps keep no state. What one step learns that the next needs (the chain reads, the
// signed bytes, the node's receipt) it returns as a hand-over, which the next step takes as an
// argument; without one, the next step reads the records instead (run-cache.ts keeps them
// between the workflow's activities in one process).
// A request the handler has not stored yet (the fast path's fresh reads, the outbox) is stored
// by what the steps write for it (the reservation, or the refusal), and it owns nothing else:
// a request stored before, or a settlement another run reserved, is left to the workflow.
import { setTimeout as sleep } from 'node:timers/promises';
import { getAddress } from 'ethers';
import { findAccountById, type Account } from '../accounts.ts';
import { EOA_TRANSFER_GAS_LIMIT } from '../chain.ts';
import type { PresignedTransaction } from '../store/reservations.ts';
import { storedGasNonce } from '../store/gas.ts';
import {
  completeSettlement,
  findSettlement,
  findSettlementState,
  recordRejected,
  type SettlementRecord,
} from '../store/records.ts';
import { loadSettleRequest, markRefused, type StoredSettleRequest } from '../store/requests.ts';
import { signerKindOf } from '../../x402/schemes/exact/verify.ts';
import { outcomeOfRecord, reverify } from './verify.ts';
import {
  isBatchRequest,
  isUptoRequest,
  settlementTerms,
  settlesWithoutTransaction,
  type SettlementRequest,
} from './request.ts';
import { presign, reserve as reserveNonce, sign } from './reserve.ts';
import { attemptsOf, firstAttempt, signedOrThrow, type Signed } from './signed.ts';
import { broadcast as sendStored } from './broadcast.ts';
import { cancelAtGasNonce } from './replace.ts';
import { awaitInclusion, outcomeOfInclusion } from './inclusion.ts';
import { recordInclusion } from './outcome.ts';
import type {
  Broadcast,
  Decided,
  Inclusion,
  Reserved,
  Reverified,
  SettlementDeps,
  SettlementOutcome,
  Verified,
} from './types.ts';

const WATCH_WINDOW_MS = 10_000;
const WATCH_PAUSE_MS = 2_000;
/** The most a confirm waits for the transfer or its cancel to be mined after the inclusion timeout (its activity's start-to-close leaves 30 s). */
const MAX_CANCEL_WAIT_MS = 20_000;
/** The wait after the cancel: the rest of the caller's deadline, less a margin for the answer. */
const cancelWaitMs = (settleDeadlineMs: number, inclusionTimeoutMs: number) =>
  Math.min(Math.max(settleDeadlineMs - inclusionTimeoutMs - 500, 1_000), MAX_CANCEL_WAIT_MS);
const GUARDRAIL_CAUSES = new Set([
  'kind_not_allowed',
  'over_per_transaction_maximum',
  'over_daily_ceiling',
  'over_failed_gas_budget',
]);

/** Step 1's reads of one settlement; fresh reads start them from the request in memory. */
export type Reads = {
  /** Fresh reads only (the request is not stored yet): whether a request for the key was stored before this one. */
  storedBefore?: Promise<boolean>;
  stored: Promise<StoredSettleRequest | null>;
  existing: Promise<SettlementRecord | null>;
  checked: Promise<Reverified>;
  account: Promise<Account | null>;
  storedNonce: Promise<number | null>;
  /** The transfer signed ahead with the predicted gas nonce (fresh reads only: signing is CPU, done while waiting too). */
  presigned?: Promise<PresignedTransaction | undefined>;
};

/** Step 1's hand-over to step 2: everything the reservation statement needs. */
export type Verification = {
  stored: StoredSettleRequest;
  /** False for a request the handler has not stored yet: the reservation (or refusal) stores it. */
  requestStored: boolean;
  existing: SettlementRecord | null;
  payer: string;
  checked: Reverified & { ok: true };
  account: Account | null;
  storedNonce: number | null;
  presigned?: Promise<PresignedTransaction | undefined>;
};

/** Step 3's hand-over to step 4: the record as it was sent, and the node's receipt if it came with the send. */
export type Sent = { record: Signed; inclusion: Inclusion | null };

/**
 * What a request not stored yet gets instead of a step's result: `stored_before`, a request for
 * the key was stored before it; `elsewhere`, another run reserved the settlement. Either way it
 * owns nothing, and the settlement's workflow decides.
 */
export type NotOwned = { step: 'stored_before' } | { step: 'elsewhere' };

/** A step's result, and what it hands to the next step when there is one. */
export type StepRun<R, H> = { result: R; handover?: H };

export type SettlementSteps = {
  /** Fresh reads: from the request in memory (not stored yet), the record and the stored request's state in one query. */
  freshReads(key: string, accountId: string, request: SettlementRequest): Reads;
  /** Step 1, re-verification (nothing written unless it refuses; a refusal is recorded). */
  verify(key: string, reads?: Reads): Promise<StepRun<Verified | NotOwned, Verification>>;
  /** Step 2, guardrails, the nonce reservation and the signed transfer stored with its gas nonce. Nothing is sent. */
  reserve(key: string, verification?: Verification): Promise<StepRun<Reserved | NotOwned, Signed>>;
  /** Step 3, sends the stored bytes. */
  broadcast(key: string, signed?: Signed): Promise<StepRun<Broadcast, Sent>>;
  /**
   * Step 4, first-block inclusion, else the cancel at the gas nonce and whichever of the two is
   * mined within the caller's deadline, then the record (`pending` when neither is mined). A
   * mined transfer is announced before the record is written.
   */
  confirm(
    key: string,
    inclusionTimeoutMs: number,
    sent?: Sent,
    announce?: (outcome: SettlementOutcome) => void,
  ): Promise<SettlementOutcome>;
  /** After a `pending` confirm: keeps watching (re-sending, bumping fees) until one attempt is mined, then records it. */
  watch(key: string, beat: () => void): Promise<SettlementOutcome>;
  /** Whether giving up is safe: no signed bytes exist (a read that fails says "not sure"). */
  nothingSigned(key: string): Promise<boolean>;
  /** Gives up before signing, durably: a later /settle of this authorization gets the same answer. */
  giveUp(key: string): Promise<Decided>;
};

const decided = (outcome: SettlementOutcome): Decided => ({ step: 'decided', outcome });
const final = (record: SettlementRecord | null) => record?.status === 'settled' || record?.status === 'failed';

export function createSettlementSteps(deps: SettlementDeps): SettlementSteps {
  const chainReads = (request: SettlementRequest, accountId: string) => ({
    checked: reverify(deps, request),
    account: findAccountById(deps.pool, accountId),
    storedNonce: storedGasNonce(deps.pool, deps.signer.address, deps.config.domain.chainId),
  });

  /**
   * The transfer presigned while the chain reads travel: an EOA's transfer has a fixed gas
   * limit, the fees are the oracle's and the nonce is the wallet's stored next one, so it can be
   * signed before the node's pending count is in. Signed again if the reads then predict
   * otherwise (the node's count higher, other fees, a contract wallet's estimate).
   */
  function presignEarly(
    request: SettlementRequest,
    chain: ReturnType<typeof chainReads>,
  ): Promise<PresignedTransaction | undefined> {
    // An upto or batch-settlement call's gas is estimated: signed once the reads are in (nothing,
    // for what settles without a transaction).
    if (isUptoRequest(request) || isBatchRequest(request))
      return Promise.all([chain.checked, chain.storedNonce]).then(([checked, nonce]) =>
        checked.ok && !settlesWithoutTransaction(request, checked.transfer.amount)
          ? presign(deps, request, checked.gas, nonce)
          : undefined,
      );
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

  const quiet = (reads: Reads) => {
    for (const read of Object.values(reads)) (read as Promise<unknown>).catch(() => undefined);
    return reads;
  };

  function freshReads(key: string, accountId: string, request: SettlementRequest): Reads {
    const state = findSettlementState(deps.pool, key);
    const chain = chainReads(request, accountId);
    return quiet({
      storedBefore: state.then((s) => s.requestStored),
      stored: Promise.resolve({ accountId, request, refusedCause: null }),
      existing: state.then((s) => s.record),
      ...chain,
      presigned: presignEarly(request, chain),
    });
  }

  /** The reads of a step without fresh reads: the stored request first, then the chain. */
  function storedReads(key: string): Reads {
    const stored = loadSettleRequest(deps.pool, key);
    const later = stored.then((s) => (s ? chainReads(s.request, s.accountId) : null));
    const pick = <T>(f: (r: ReturnType<typeof chainReads>) => Promise<T>, none: T) =>
      later.then((r) => (r ? f(r) : none));
    return quiet({
      stored,
      existing: findSettlement(deps.pool, key),
      checked: pick((r) => r.checked, { ok: false, cause: 'request_missing' } as Reverified),
      account: pick((r) => r.account, null),
      storedNonce: pick((r) => r.storedNonce, null),
    });
  }

  async function verify(key: string, reads = storedReads(key)): Promise<StepRun<Verified | NotOwned, Verification>> {
    const requestStored = reads.storedBefore === undefined;
    const [stored, existing, storedBefore] = await Promise.all([reads.stored, reads.existing, reads.storedBefore]);
    if (storedBefore) return { result: { step: 'stored_before' } };
    if (final(existing)) return { result: decided(outcomeOfRecord(existing!)) };
    // A request not stored yet owns nothing that exists: the record is another run's.
    if (!requestStored && existing) return { result: { step: 'elsewhere' } };
    // Bytes stored by an earlier run go straight to delivery: re-verifying now would see their
    // own transaction's effects (a used nonce) as a reason to refuse.
    if (existing?.txHash)
      return { result: { step: 'signed', payer: getAddress(existing.payer), txHash: existing.txHash.toLowerCase() } };
    if (!stored) throw new Error('settle request missing for key');
    const terms = settlementTerms(stored.request);
    const payer = terms.payer;
    // Refused before (a guardrail, or a run that gave up before signing): the same answer, never a fresh reservation.
    if (!existing && stored.refusedCause) {
      const guardrail = GUARDRAIL_CAUSES.has(stored.refusedCause);
      const status = guardrail ? 'rejected' : 'failed';
      return { result: decided({ status, payer, transaction: null, cause: stored.refusedCause }) };
    }
    const [checked, account, storedNonce] = await Promise.all([reads.checked, reads.account, reads.storedNonce]);
    if (!checked.ok) {
      // A reserved record (a run resumed after a crash) gives its reservation back.
      if (existing) await completeSettlement(deps.pool, key, { status: 'failed', cause: checked.cause });
      else {
        await recordRejected(deps.pool, {
          key,
          accountId: stored.accountId,
          ...terms,
          cause: checked.cause,
          request: requestStored ? undefined : stored.request,
        });
      }
      return { result: decided({ status: 'failed', payer, transaction: null, cause: checked.cause }) };
    }
    // An upto charge of 0 moves nothing, nor does a claim the chain already holds: settled as it
    // stands, with no transaction and nothing reserved, recorded so a duplicate gets the same answer.
    if (settlesWithoutTransaction(stored.request, checked.transfer.amount)) {
      const record = await recordRejected(deps.pool, {
        key,
        accountId: stored.accountId,
        ...terms,
        cause: null,
        status: 'settled',
        request: requestStored ? undefined : stored.request,
      });
      // Another run's record (the same authorization decided meanwhile) is the answer.
      return { result: decided(outcomeOfRecord(record)) };
    }
    return {
      result: { step: 'verified', payer },
      handover: { stored, requestStored, existing, payer, checked, account, storedNonce, presigned: reads.presigned },
    };
  }

  async function reserve(key: string, handed?: Verification): Promise<StepRun<Reserved | NotOwned, Signed>> {
    let v = handed;
    if (!v) {
      // No verification handed over (a retry, another worker): verify again from the records.
      const again = await verify(key);
      if (!again.handover) return { result: again.result as Reserved };
      v = again.handover;
    }
    const { stored, requestStored, payer, checked, account, storedNonce } = v;
    let { existing } = v;
    if (requestStored) {
      // The workflow's step may follow its verification on another worker, or after a retry:
      // what another run did meanwhile (reserved, signed, decided) is read first.
      const now = await findSettlement(deps.pool, key);
      if (final(now)) return { result: decided(outcomeOfRecord(now!)) };
      if (now?.txHash)
        return { result: { step: 'signed', payer: getAddress(now.payer), txHash: now.txHash.toLowerCase() } };
      existing = now;
    }
    if (!account) throw new Error('facilitator account missing');
    // A reserved record without bytes (resumed run) is signed under the row lock, never presigned.
    const presigned = existing
      ? undefined
      : await (v.presigned ?? presign(deps, stored.request, checked.gas, storedNonce));
    // A reserved record keeps its reservation: reserving again would meet the daily ceiling
    // first and, with the ceiling full, refuse the very settlement it already holds.
    const reservation = existing
      ? { reserved: existing }
      : await reserveNonce(
          deps,
          key,
          account,
          stored.request,
          checked.transfer,
          checked.gas,
          presigned,
          !requestStored,
        );
    if ('rejected' in reservation) {
      // Refused while another submission's reservation of this authorization stands (its
      // account may differ): that settlement is not refused; it goes on under its own run.
      if (await findSettlement(deps.pool, key)) return requestStored ? reserve(key) : { result: { step: 'elsewhere' } };
      return { result: decided({ status: 'rejected', payer, transaction: null, cause: reservation.rejected }) };
    }
    if (!requestStored && reservation.raced) return { result: { step: 'elsewhere' } };
    const signed = reservation.reserved.rawTx
      ? reservation.reserved
      : await sign(deps, key, stored.request, checked.gas);
    const record = signedOrThrow(signed);
    return { result: { step: 'signed', payer, txHash: record.txHash.toLowerCase() }, handover: record };
  }

  return {
    freshReads,
    verify,
    reserve,

    async broadcast(key, signed) {
      const record = signed ?? signedOrThrow(await findSettlement(deps.pool, key));
      if (final(record)) return { result: decided(outcomeOfRecord(record)) };
      const inclusion = await sendStored(deps, record);
      return {
        result: { step: 'sent', txHash: record.txHash.toLowerCase(), mined: !!inclusion },
        handover: { record, inclusion },
      };
    },

    async confirm(key, inclusionTimeoutMs, sent, announce) {
      const record = sent?.record ?? signedOrThrow(await findSettlement(deps.pool, key));
      if (final(record)) return outcomeOfRecord(record);
      // Just sent (handed over): the first attempt and the node's receipt, if it came with the send.
      const attempts = sent ? firstAttempt(record) : await attemptsOf(deps, record);
      let inclusion =
        sent?.inclusion ?? (await awaitInclusion(deps, record, attempts, Date.now() + inclusionTimeoutMs));
      if (!inclusion.mined) {
        const watched = await cancelAtGasNonce(deps, record);
        inclusion = await awaitInclusion(
          deps,
          record,
          watched,
          Date.now() + cancelWaitMs(deps.config.settleDeadlineMs, inclusionTimeoutMs),
        );
      }
      // Only a successful transfer is announced before its record: a revert asks the token first
      // (someone else may have used the authorization), a cancel may be followed by a re-submission.
      if (inclusion.mined && inclusion.success && !inclusion.cancelled)
        announce?.(outcomeOfInclusion(record, inclusion));
      return recordInclusion(deps, record, inclusion);
    },

    async watch(key, beat) {
      const found = signedOrThrow(await findSettlement(deps.pool, key));
      if (final(found)) return outcomeOfRecord(found);
      // Signed but never sent (its run is gone: the sweeper started this watcher): sent first,
      // and counted. A node refusing them is no failure: the watch below re-sends what it lost.
      if (found.status === 'signed') await sendStored(deps, found).catch(() => undefined);
      for (;;) {
        const record = signedOrThrow(await findSettlement(deps.pool, key));
        const inclusion = await awaitInclusion(
          deps,
          record,
          await attemptsOf(deps, record),
          Date.now() + WATCH_WINDOW_MS,
          beat,
        );
        if (inclusion.mined) {
          // A mined cancel, or a revert with the authorization unused, stays pending until the
          // chain is past the authorization's validBefore (or the authorization is used).
          const outcome = await recordInclusion(deps, record, inclusion);
          if (outcome.status !== 'pending') return outcome;
        }
        beat();
        await sleep(WATCH_PAUSE_MS);
      }
    },

    async nothingSigned(key) {
      const record = await findSettlement(deps.pool, key).catch(() => undefined);
      return record !== undefined && !record?.rawTx;
    },

    async giveUp(key) {
      await markRefused(deps.pool, key, 'unavailable');
      return decided({ status: 'failed', payer: '', transaction: null, cause: 'unavailable' });
    },
  };
}
