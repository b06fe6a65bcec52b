// The steps of one settlement as plain functions over the facilitator's records and the chain,
// in the order SettlementWorkflow runs them: verify → claim (guardrails, the nonce claim, the
// transfer signed and stored) → broadcast → confirm (first-block inclusion, the cancel after
// the inclusion timeout, the record); and the watch after a confirm left `pending`.
// Each step is idempotent against the records (the UNIQUE claim, the stored bytes with their
// gas nonce), so a step retried, or run again on another worker after a crash, redoes only
// what is missing and can only ever send the one stored transaction. What a step learns that
// the next needs (the chain reads, the signed bytes, the node's receipt) is handed over in
// memory within this process; a step on another worker reads the records instead.
import { getAddress } from 'ethers';
import { findAccountById, type Account } from '../accounts.ts';
import { EOA_TRANSFER_GAS_LIMIT } from '../chain.ts';
import type { PresignedTransaction } from '../store/claims.ts';
import { storedGasNonce } from '../store/gas.ts';
import {
  completeSettlement,
  findSettlement,
  findSettlementState,
  recordRejected,
  type SettlementRecord,
} from '../store/records.ts';
import { loadSettleRequest, markRefused, type StoredSettleRequest } from '../store/requests.ts';
import type { SettleRequest } from '../../x402/schemas.ts';
import { signerKindOf } from '../../x402/verify.ts';
import { outcomeOfRecord, reverify, type Reverified } from './verify.ts';
import { claim as claimNonce, presign, sign } from './claim.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { attemptsOf, firstAttempt, signedOrThrow, type Signed } from './signed.ts';
import { broadcast as sendStored } from './broadcast.ts';
import { cancelAtGasNonce } from './replace.ts';
import { awaitInclusion, outcomeOfInclusion } from './inclusion.ts';
import { recordInclusion } from './outcome.ts';
import type { Broadcast, Claimed, Decided, Inclusion, SettlementDeps, SettlementOutcome, Verified } from './types.ts';

const WATCH_WINDOW_MS = 10_000;
const WATCH_PAUSE_MS = 2_000;
/** The most a confirm waits for the transfer or its cancel to be mined after the inclusion timeout (its activity's start-to-close leaves 30 s). */
const MAX_CANCEL_WAIT_MS = 20_000;
/** The wait after the cancel: the rest of the caller's deadline, less a margin for the answer. */
const cancelWaitMs = (settleDeadlineMs: number, inclusionTimeoutMs: number) =>
  Math.min(Math.max(settleDeadlineMs - inclusionTimeoutMs - 500, 1_000), MAX_CANCEL_WAIT_MS);
/** Hand-overs kept in memory for the next step, at most (a crash or a lost step only costs a read). */
const MAX_HANDOVERS = 10_000;
const HANDOVER_MS = 5_000;
const GUARDRAIL_CAUSES = new Set([
  'kind_not_allowed',
  'over_per_transaction_maximum',
  'over_daily_ceiling',
  'over_failed_gas_budget',
]);

/** Step 1's reads of one settlement; the fast path starts them from the request in memory. */
export type Reads = {
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

/** What verification hands to the claim: everything the claim statement needs. */
type Verification = {
  stored: StoredSettleRequest;
  existing: SettlementRecord | null;
  payer: string;
  checked: Reverified & { ok: true };
  account: Account | null;
  storedNonce: number | null;
  presigned?: Promise<PresignedTransaction | undefined>;
};

/** A fast-path run's own answers: the request was stored before it, or another run claimed the settlement. */
export type NotOwned = { step: 'stored_before' } | { step: 'elsewhere' };

export type SettlementSteps = {
  /** Re-verification (nothing written unless it refuses; a refusal is recorded). */
  verify(key: string, reads?: Reads): Promise<Verified>;
  /** Guardrails, the nonce claim and the signed transfer stored with its gas nonce. Nothing is sent. */
  claim(key: string): Promise<Claimed>;
  /** Sends the stored bytes. */
  broadcast(key: string): Promise<Broadcast>;
  /**
   * First-block inclusion, else the cancel at the gas nonce and whichever of the two is mined
   * within the caller's deadline, then the record (`pending` when neither is mined). A mined
   * transfer is announced before the record is written.
   */
  confirm(
    key: string,
    inclusionTimeoutMs: number,
    announce?: (outcome: SettlementOutcome) => void,
  ): Promise<SettlementOutcome>;
  /** After a `pending` confirm: keeps watching (re-sending, bumping fees) until one attempt is mined, then records it. */
  watch(key: string, beat: () => void): Promise<SettlementOutcome>;
  /** The fast path's verify and claim: only for a request not stored before, stored with its claim or refusal. */
  verifyOwn(key: string, reads: Reads): Promise<Verified | NotOwned>;
  claimOwn(key: string): Promise<Claimed | NotOwned>;
  /** Reads from the request in memory, the record and the stored request's state in one query. */
  freshReads(key: string, accountId: string, request: SettleRequest): Reads;
  /** Whether giving up is safe: no signed bytes exist (a read that fails says "not sure"). */
  nothingSigned(key: string): Promise<boolean>;
  /** Gives up before signing, durably: a later /settle of this authorization gets the same answer. */
  giveUp(key: string): Promise<Decided>;
  /** Drops what the steps left each other for `key` (a run that ended). */
  forget(key: string): void;
};

const decided = (outcome: SettlementOutcome): Decided => ({ step: 'decided', outcome });

/**
 * What one step leaves for the next in this process: taken once, and only within HANDOVER_MS
 * (the next step of one run follows at once; an entry older than that belongs to a run that
 * stopped, and the records may have moved on since). At most MAX_HANDOVERS entries; a hand-over
 * lost costs the next step a read, never correctness.
 */
function handovers<T>() {
  const map = new Map<string, { value: T; at: number }>();
  return {
    put(key: string, value: T) {
      if (map.size >= MAX_HANDOVERS) map.delete(map.keys().next().value!);
      map.set(key, { value, at: Date.now() });
    },
    take(key: string): T | undefined {
      const entry = map.get(key);
      map.delete(key);
      return entry && Date.now() - entry.at <= HANDOVER_MS ? entry.value : undefined;
    },
    forget: (key: string) => void map.delete(key),
  };
}

export function createSettlementSteps(deps: SettlementDeps): SettlementSteps {
  const verified = handovers<Verification>();
  const signedNow = handovers<Signed>();
  const sentNow = handovers<{ record: Signed; inclusion: Inclusion | null }>();

  const chainReads = (request: SettleRequest, accountId: string) => ({
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

  const quiet = (reads: Reads) => {
    for (const read of Object.values(reads)) (read as Promise<unknown>).catch(() => undefined);
    return reads;
  };

  function freshReads(key: string, accountId: string, request: SettleRequest): Reads {
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

  async function verifyStep(key: string, reads: Reads, own: boolean): Promise<Verified | NotOwned> {
    const [stored, existing, storedBefore] = await Promise.all([reads.stored, reads.existing, reads.storedBefore]);
    if (own && storedBefore) return { step: 'stored_before' };
    if (existing?.status === 'settled' || existing?.status === 'failed') return decided(outcomeOfRecord(existing));
    if (own && existing) return { step: 'elsewhere' };
    // Bytes stored by an earlier run go straight to delivery: re-verifying now would see their
    // own transaction's effects (a used nonce) as a reason to refuse.
    if (existing?.txHash)
      return { step: 'signed', payer: getAddress(existing.payer), txHash: existing.txHash.toLowerCase() };
    if (!stored) throw new Error('settle request missing for key');
    const authorization = stored.request.paymentPayload.payload.authorization;
    // Lowercased first: a mixed-case address with a bad checksum must not throw here (the
    // signature check, which does not care about case, already passed in the handler).
    const payer = getAddress(authorization.from.toLowerCase());
    // Refused before (a guardrail, or a run that gave up before signing): the same answer, never a fresh claim.
    if (!existing && stored.refusedCause) {
      const guardrail = GUARDRAIL_CAUSES.has(stored.refusedCause);
      return decided({
        status: guardrail ? 'rejected' : 'failed',
        payer,
        transaction: null,
        cause: stored.refusedCause,
      });
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
      return decided({ status: 'failed', payer, transaction: null, cause: checked.cause });
    }
    verified.put(key, { stored, existing, payer, checked, account, storedNonce, presigned: reads.presigned });
    return { step: 'verified', payer };
  }

  async function claimStep(key: string, own: boolean): Promise<Claimed | NotOwned> {
    let v = verified.take(key);
    if (!v) {
      // No verification handed over in this process (a retry, another worker): verify again.
      const again = await verifyStep(key, storedReads(key), false);
      if (again.step !== 'verified') return again as Claimed;
      v = verified.take(key)!;
    }
    const { stored, payer, checked, account, storedNonce } = v;
    let { existing } = v;
    if (!own) {
      // A workflow step may follow its verification on another worker, or after a retry: what
      // another run did meanwhile (claimed, signed, decided) is read first.
      const now = await findSettlement(deps.pool, key);
      if (now?.status === 'settled' || now?.status === 'failed') return decided(outcomeOfRecord(now));
      if (now?.txHash) return { step: 'signed', payer: getAddress(now.payer), txHash: now.txHash.toLowerCase() };
      existing = now;
    }
    if (!account) throw new Error('facilitator account missing');
    // A claimed record without bytes (resumed run) is signed under the row lock, never presigned.
    const presigned = existing
      ? undefined
      : await (v.presigned ?? presign(deps, stored.request, checked.gas, storedNonce));
    // A claimed record keeps its claim and reservation: claiming again would meet the daily
    // ceiling first and, with the ceiling full, refuse the very settlement it already holds.
    const claimed = existing
      ? { claimed: existing }
      : await claimNonce(deps, key, account, stored.request, checked.transfer, checked.gas, presigned, own);
    if ('rejected' in claimed) {
      // Refused while another submission's claim of this authorization stands (its account may
      // differ): that settlement is not refused; it goes on under its own run.
      if (await findSettlement(deps.pool, key)) return own ? { step: 'elsewhere' } : claimStep(key, false);
      return decided({ status: 'rejected', payer, transaction: null, cause: claimed.rejected });
    }
    if (own && claimed.raced) return { step: 'elsewhere' };
    const signed = claimed.claimed.rawTx ? claimed.claimed : await sign(deps, key, stored.request, checked.gas);
    const record = signedOrThrow(signed);
    signedNow.put(key, record);
    return { step: 'signed', payer, txHash: record.txHash.toLowerCase() };
  }

  async function signedRecord(key: string): Promise<Signed | Decided> {
    const record = signedNow.take(key) ?? signedOrThrow(await findSettlement(deps.pool, key));
    return record.status === 'settled' || record.status === 'failed' ? decided(outcomeOfRecord(record)) : record;
  }

  const steps: SettlementSteps = {
    freshReads,
    verify: (key, reads) => verifyStep(key, reads ?? storedReads(key), false) as Promise<Verified>,
    verifyOwn: (key, reads) => verifyStep(key, reads, true),
    claim: (key) => claimStep(key, false) as Promise<Claimed>,
    claimOwn: (key) => claimStep(key, true),

    async broadcast(key) {
      const record = await signedRecord(key);
      if ('step' in record) return record;
      const inclusion = await sendStored(deps, record);
      sentNow.put(key, { record, inclusion });
      return { step: 'sent', txHash: record.txHash.toLowerCase(), mined: !!inclusion };
    },

    async confirm(key, inclusionTimeoutMs, announce) {
      // Just sent here: the record as it was sent and the node's receipt, if it came with the send.
      const justSent = sentNow.take(key);
      const record = justSent?.record ?? signedOrThrow(await findSettlement(deps.pool, key));
      if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
      const attempts = justSent ? firstAttempt(record) : await attemptsOf(deps, record);
      let inclusion =
        justSent?.inclusion ?? (await awaitInclusion(deps, record, attempts, Date.now() + inclusionTimeoutMs));
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
      if (found.status === 'settled' || found.status === 'failed') return outcomeOfRecord(found);
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

    forget(key) {
      verified.forget(key);
      signedNow.forget(key);
      sentNow.forget(key);
    },

    async giveUp(key) {
      await markRefused(deps.pool, key, 'unavailable');
      return decided({ status: 'failed', payer: '', transaction: null, cause: 'unavailable' });
    },
  };
  return steps;
}
