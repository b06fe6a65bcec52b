// The admission of a `batch-settlement` payment (the x402 spec's server side): one channel's calls
// are served one at a time, across replicas. A streamed voucher is admitted in the channel's turn
// in a process that holds the channel between calls (owners.ts), on the state it keeps; any other
// payment holds the channel (store.ts's lease) from here until its charge is committed after the
// answer (api/invoke/stream-record.ts, the invocation workflow, the due-charges round). A call
// finding its channel held waits up to CHANNEL_WAIT_MS, then is answered the spec's `channel_busy`.
// - the voucher's cumulative ceiling must be exactly what was charged so far plus this call's
//   ceiling (a refund's: what was charged), else the corrective 402 carries the channel's state
//   and the payer's latest voucher, so a client that lost its state recovers;
// - a voucher is checked here with no network round trip when the mirrored on-chain state is
//   fresh (read again after MIRROR_FRESH_MS, and for every deposit and refund);
// - a deposit is handed to the tenant's facilitator, and the call is served once it is final;
// - a refund is completed (the refund nonce) and handed to the facilitator; nothing is forwarded.
import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import type { BatchSettlementPayload } from '../../../x402/schemes/batch-settlement/schemas.ts';
import { verifyDeposit } from '../../../x402/schemes/batch-settlement/verify.ts';
import type { ChallengeEntry, Payment } from '../../../x402/schemas.ts';
import { encodeBase64Json } from '../../../x402/schemas.ts';
import { caip2Network, type SettleResponseV2 } from '../../../x402/v2.ts';
import { loadSettlementClientTls } from '../../settlement/tls.ts';
import { recordPayment } from '../binding.ts';
import type { PaymentConfig } from '../config.ts';
import { requirementsV2, type Dialect } from '../dialect.ts';
import type { FacilitatorClient } from '../facilitator-client.ts';
import { PaymentRefused, PaymentStillSettling } from '../refusals.ts';
import { channelTermsOf } from '../schemes/batch-settlement/index.ts';
import { readChannel, type OnChainChannel } from '../schemes/batch-settlement/chain.ts';
import { earlierRefundNonce, recordRefund, refundPaymentNonce } from './refunds.ts';
import { channelCommitOrTimeout } from './local-releases.ts';
import {
  createChannelStore,
  HOLD_LEASE_SECONDS,
  LEASE_SECONDS,
  settleDeadlineUnderLease,
  type ChannelLease,
  type ChannelRow,
  type ChannelStore,
  type LeaseBinding,
  type RefundInDoubt,
} from './store.ts';
import type { MikroORM } from '@mikro-orm/postgresql';
import { leaseAskedAt, newer, type ChannelOwners } from './owners.ts';
import type { KeptVoucher } from '../entity.ts';
import type { VaultConfig } from '../../credentials/config.ts';
import type { VaultClient } from '../../credentials/vault.ts';
import type { Logger } from '../../../lib/log.ts';
import { errorKind } from '../../../lib/error-kind.ts';

/**
 * How long a refund whose outcome is not known keeps its channel's payments waiting for it
 * (settleDoubt): a facilitator's transaction is included or cancelled within minutes; one that
 * keeps refusing to say after a day is taken to have given up.
 */
const REFUND_DOUBT_MAX_MS = 24 * 3_600_000;

/** How long a call waits for its channel held by another call before `channel_busy`. */
const CHANNEL_WAIT_MS = 5_000;
/** How old the mirrored on-chain state may be for a voucher to be checked without reading the chain. */
const MIRROR_FRESH_MS = 60_000;
const UNFUNDED_FOR_MS = 30_000;
/**
 * Channels the chain said were unfunded, answered so again without a read for UNFUNDED_FOR_MS
 * (this process's: a voucher of a made-up channel costs a caller's request one chain read, not
 * one per request). A deposit is never refused by it, and clears it.
 */
const unfunded = new LRUCache<string, true>({ max: 10_000, ttl: UNFUNDED_FOR_MS });

const CUMULATIVE_MISMATCH = 'invalid_batch_settlement_evm_cumulative_amount_mismatch';
const CHANNEL_BUSY = 'invalid_batch_settlement_evm_channel_busy';
/**
 * The payer started a timed withdrawal (the gateway's name: the spec has none). A call served
 * now could be charged after the withdrawal finalized, which would take the escrow the charge is
 * claimed from; the claims round claims what was charged before then (channel-claims/due.ts).
 * A cooperative refund is still taken.
 */
const WITHDRAWAL_PENDING = 'invalid_batch_settlement_evm_withdrawal_pending';
/**
 * The channel was opened paying another seller on this gateway (another tenant naming the same
 * receiver and facilitator): a channel is its first seller's, its state never shared (the
 * gateway's name: the spec has none). The payer opens a channel of its own for this agent.
 */
const CHANNEL_ELSEWHERE = 'invalid_batch_settlement_evm_channel_of_another_seller';

/** Another call holds the channel: the payer retries shortly with the same payment. */
export class ChannelBusy extends Error {
  readonly entries: ChallengeEntry[];
  constructor(entries: ChallengeEntry[]) {
    super(CHANNEL_BUSY);
    this.name = 'ChannelBusy';
    this.entries = entries;
  }
}

/** A cooperative refund, done: the answer the payer gets instead of the agent's (nothing was forwarded). */
export class ChannelRefunded extends Error {
  readonly responseHeader: string;
  readonly refunded: string;
  readonly transaction: string;
  constructor(responseHeader: string, refunded: string, transaction: string) {
    super('refunded');
    this.name = 'ChannelRefunded';
    this.responseHeader = responseHeader;
    this.refunded = refunded;
    this.transaction = transaction;
  }
}

export type ChannelAdmissionDeps = {
  orm: MikroORM;
  log: Logger;
  config: { vault: VaultConfig };
  vaultClient: VaultClient;
};

/** The verified offer, as the flow decoded it. */
export type ChannelOffer = {
  dialect: Dialect;
  payment: Payment;
  requirements: ChallengeEntry;
  entries: ChallengeEntry[];
  paymentId: string | null;
  payer: string;
  nonce: string;
  /** The payer's signature, not checked yet (the scheme's verifyTerms); null: checked. */
  signed: (() => Promise<boolean>) | null;
};

/** What an admitted channel payment records of the call, and answers the payer. */
export type AdmittedChannelPayment = {
  /** The name of the call's payment binding. */
  nonce: string;
  channel: AdmittedChannel;
  transaction: string | null;
  /** The SettleResponse the payer keeps its channel's state from: PAYMENT-RESPONSE, or in the JSON-RPC answer. */
  receipt: SettleResponseV2;
};

/**
 * The channel an admitted call is paid from: its lease's token and, on a channel this process
 * holds between calls (owners.ts), the call's turn: its own name for it (the lease is the
 * hold's) and the payment its binding is to keep, written with the call's row as it is forwarded.
 */
export type AdmittedChannel = {
  id: string;
  leaseToken: string;
  turn?: {
    call: string;
    signedPayment: KeptVoucher;
    /** The voucher's signature, checked as the call's row is written; the call is forwarded only once it answered true. */
    signed: (() => Promise<boolean>) | null;
  };
};

type ChannelState = ReturnType<typeof channelStateOf>;

/** The spec's `channelState` of a channel as the gateway knows it. */
function channelStateOf(channel: ChannelRow, charged = channel.charged) {
  return {
    channelId: channel.id,
    balance: channel.balance.toString(),
    totalClaimed: channel.totalClaimed.toString(),
    withdrawRequestedAt: channel.withdrawRequestedAt,
    refundNonce: channel.refundNonce.toString(),
    chargedCumulativeAmount: charged.toString(),
  };
}

/** The corrective 402's entries: the channel's state and the payer's latest voucher in `extra`. */
function correctiveEntries(entries: ChallengeEntry[], channel: ChannelRow): ChallengeEntry[] {
  return entries.map((entry) => ({
    ...entry,
    extra: {
      ...entry.extra,
      channelState: channelStateOf(channel),
      ...(channel.signature
        ? { voucherState: { signedMaxClaimable: channel.signedMaxClaimable.toString(), signature: channel.signature } }
        : {}),
    },
  }));
}

/**
 * What the channel's state says of a voucher or refund whose config and signature the scheme
 * checked (schemes/batch-settlement/): the escrow must cover its ceiling, which a paid voucher
 * must raise above the claimed total (a refund's may equal it). Null when it does.
 */
function escrowCause(type: 'voucher' | 'refund', signed: bigint, channel: ChannelRow): string | null {
  if (channel.balance === 0n) return 'invalid_batch_settlement_evm_channel_not_found';
  if (signed > channel.balance) return 'invalid_batch_settlement_evm_cumulative_exceeds_balance';
  const below = type === 'voucher' ? signed <= channel.totalClaimed : signed < channel.totalClaimed;
  return below ? 'invalid_batch_settlement_evm_cumulative_below_claimed' : null;
}

/** Whether the channel's mirror of the chain is too old to check a voucher against. */
const stale = (row: ChannelRow) => !row.syncedAt || Date.now() - row.syncedAt.getTime() > MIRROR_FRESH_MS;

/** The channel's on-chain state read again and mirrored (PaymentStillSettling when the chain does not answer). */
async function readAgain(store: ChannelStore, config: PaymentConfig, channelId: string): Promise<ChannelRow> {
  try {
    const readAt = new Date();
    return await store.mirror(channelId, await readChannel(config.contractSignatures, channelId), readAt);
  } catch {
    throw new PaymentStillSettling();
  }
}

/**
 * Refuses a payment its channel's state does not admit: a voucher or deposit while a timed
 * withdrawal is pending, and a cumulative ceiling other than `expected` (the corrective 402,
 * carrying the channel's state and the payer's latest voucher).
 */
function refuseByState(
  log: Logger,
  call: { requestId: string },
  entries: ChallengeEntry[],
  refused: (cause: string, reason?: string) => PaymentRefused,
  channel: ChannelRow,
  type: BatchSettlementPayload['type'],
  signed: bigint,
  expected: bigint,
): void {
  if (type !== 'refund' && channel.withdrawRequestedAt > 0) throw refused('withdrawal_pending', WITHDRAWAL_PENDING);
  if (signed === expected) return;
  log.info(
    { requestId: call.requestId, channelId: channel.id, signed: String(signed), expected: String(expected) },
    'channel voucher mismatch: corrective 402',
  );
  throw new PaymentRefused(CUMULATIVE_MISMATCH, correctiveEntries(entries, channel), true);
}

/**
 * The lease a call takes on its channel: a call's (or a refund's) for LEASE_SECONDS, a hold's for
 * HOLD_LEASE_SECONDS (its holder renews it).
 */
function leaseOf(
  channelId: string,
  call: { tenantId: string; agentId: string; recordsAsItForwards?: boolean },
  payload: BatchSettlementPayload,
  hold = false,
): Parameters<ChannelStore['lease']>[0] {
  return {
    channelId,
    tenantId: call.tenantId,
    agentId: call.agentId,
    config: payload.channelConfig,
    // A stream renews its own lease as it goes (api/invoke/stream-record.ts); a transactional
    // call's accept commit extends it to cover its workflow's queue (store.ts keepAcceptedLease);
    // a refund is no call.
    seconds: hold ? HOLD_LEASE_SECONDS : LEASE_SECONDS,
    hold,
  };
}

async function leaseWithin(store: ChannelStore, input: Parameters<ChannelStore['lease']>[0]) {
  const deadline = Date.now() + CHANNEL_WAIT_MS;
  for (let wait = 2; ; wait = Math.min(wait * 2, 200)) {
    // Its holder is asked for it once, by the first attempt that finds it held.
    const outcome = await store.lease({ ...input, ask: wait === 2 });
    if (outcome !== 'busy' || Date.now() + wait > deadline) return outcome;
    await channelCommitOrTimeout(input.channelId, wait);
  }
}

/**
 * A voucher on a channel this process holds between calls: checked against the held state in the
 * channel's turn, with no round trip when the hold is trusted and the mirror fresh; the lease is
 * taken (and the channel held from then on) when it is not held here. The turn lasts until the
 * call's charge (owners.finish) or its refusal (owners.abandon).
 */
async function admitOnHeldChannel(
  deps: ChannelAdmissionDeps,
  owners: ChannelOwners,
  store: ChannelStore,
  config: PaymentConfig,
  call: { tenantId: string; agentId: string; requestId: string },
  offer: ChannelOffer,
  payload: Extract<BatchSettlementPayload, { type: 'voucher' }>,
  channelId: string,
  ceiling: bigint,
  refused: (cause: string, reason?: string) => PaymentRefused,
): Promise<AdmittedChannelPayment> {
  const { entries } = offer;
  const turn = await owners.turn(channelId, CHANNEL_WAIT_MS);
  if (!turn) throw new ChannelBusy(entries);
  let admitted = false;
  try {
    const found = await turn.held();
    if (found === 'unknown') throw new ChannelBusy(entries);
    let held = found;
    if (held && held.tenantId !== call.tenantId) throw refused('channel_of_another_tenant', CHANNEL_ELSEWHERE);
    if (!held) {
      // Taking the lease (and asking another process for it) is for a voucher its payer signed.
      if (offer.signed && !(await offer.signed())) throw refused('invalid_batch_settlement_evm_voucher_signature');
      if (unfunded.has(channelId) && !(await store.funded(channelId)))
        throw refused('invalid_batch_settlement_evm_channel_not_found');
      // Before the lease is asked for: the hold's trust runs from no later than the lease's start.
      const askedAt = leaseAskedAt();
      const leased = await leaseWithin(store, leaseOf(channelId, call, payload, true));
      if (leased === 'foreign') throw refused('channel_of_another_tenant', CHANNEL_ELSEWHERE);
      if (leased === 'busy') throw new ChannelBusy(entries);
      if (leased.channel.refundInDoubt) {
        // A refund's outcome to learn first (settleDoubt): not held, the lease let go for the other path.
        await store.letGo(leased.lease).catch(() => undefined);
        throw new RefundToLearn();
      }
      held = turn.hold(leased.lease.token, call.tenantId, leased.channel, askedAt);
    }
    if (stale(held.row)) {
      // The chain's side from the read; the charged total and the latest voucher stay the held
      // state's (its last charges may not be written yet).
      held.row = newer(held.row, await readAgain(store, config, channelId));
    }
    const channel = held.row;
    if (channel.balance === 0n) {
      // Nothing in escrow: not held, and its row not kept if it holds nothing (store.letGo).
      unfunded.set(channelId, true);
      turn.unhold();
      await store.letGo({ channelId, token: held.token }).catch(() => undefined);
      throw refused('invalid_batch_settlement_evm_channel_not_found');
    }
    const signed = BigInt(payload.voucher.maxClaimableAmount);
    refuseByState(deps.log, call, offer.entries, refused, channel, 'voucher', signed, channel.charged + ceiling);
    const cause = escrowCause('voucher', signed, channel);
    if (cause) throw refused(cause);
    const callToken = randomUUID();
    turn.admitted(callToken, { maxClaimable: signed, signature: payload.voucher.signature });
    admitted = true;
    return {
      nonce: `${offer.nonce}-${callToken}`,
      channel: {
        id: channelId,
        leaseToken: held.token,
        turn: {
          call: callToken,
          signedPayment: keptVoucher(payload.voucher, held.token),
          signed: offer.signed,
        },
      },
      transaction: null,
      receipt: receiptOf(config, offer.payer, channel, ceiling, null, ''),
    };
  } finally {
    if (!admitted) turn.end();
  }
}

/** A voucher for the held path whose channel has a refund's outcome to learn first (settleDoubt). */
class RefundToLearn extends Error {}

const fromState = (state: {
  balance: string;
  totalClaimed: string;
  withdrawRequestedAt: number;
  refundNonce: string;
}): OnChainChannel => ({
  balance: BigInt(state.balance),
  totalClaimed: BigInt(state.totalClaimed),
  withdrawRequestedAt: state.withdrawRequestedAt,
  refundNonce: BigInt(state.refundNonce),
});

export async function admitChannelPayment(
  deps: ChannelAdmissionDeps,
  gate: { config: PaymentConfig; client: FacilitatorClient; owners: ChannelOwners | null },
  call: {
    tenantId: string;
    agentId: string;
    requestId: string;
    /**
     * The call's door writes its row with its payment as it forwards it and answers only once
     * that is written (api/invoke/stream-record.ts): a voucher may then be admitted on a channel
     * this process holds between calls (owners.ts).
     */
    recordsAsItForwards?: boolean;
  },
  offer: ChannelOffer,
): Promise<AdmittedChannelPayment> {
  const { config, client, owners } = gate;
  const { entries, requirements } = offer;
  // Parsed already, by the scheme's protocol as the offer was decoded (gateway/payment/dialect.ts).
  const payload = offer.payment.payload as BatchSettlementPayload;
  const terms = channelTermsOf(requirements);
  const refused = (cause: string, reason = 'invalid payment') => {
    deps.log.info({ requestId: call.requestId, agentId: call.agentId, cause }, 'channel payment refused');
    return new PaymentRefused(reason, entries);
  };
  if (!terms) throw refused('invalid_terms');
  const channelId = payload.voucher.channelId.toLowerCase();
  const ceiling = BigInt(requirements.maxAmountRequired);
  const store = createChannelStore(deps.orm);
  if (owners && payload.type === 'voucher' && !offer.paymentId && call.recordsAsItForwards) {
    try {
      return await admitOnHeldChannel(deps, owners, store, config, call, offer, payload, channelId, ceiling, refused);
    } catch (err) {
      // A channel with a refund's outcome to learn goes the way below, which asks for it.
      if (!(err instanceof RefundToLearn)) {
        // A refusal (its corrective 402 shows the channel's state) only for the payer's own signature.
        if (offer.signed && !(await offer.signed())) throw refused('invalid_batch_settlement_evm_voucher_signature');
        throw err;
      }
    }
  }
  // The tenant's facilitator, for a deposit or a refund only: a voucher needs nobody but the
  // gateway (reading the credential costs a decryption, which a voucher call does not pay).
  const facilitator = async () => {
    let target;
    try {
      target = await loadSettlementClientTls(deps, call.tenantId);
    } catch {
      throw new PaymentRefused('settlement_unavailable', entries);
    }
    if (!target) throw new PaymentRefused('settlement_unavailable', entries);
    return target;
  };

  const settleBodyFor = (entry: ChallengeEntry, action: unknown) => {
    const v2 = requirementsV2(config, entry);
    return {
      x402Version: 2,
      paymentPayload: { x402Version: 2, accepted: v2, payload: action },
      paymentRequirements: v2,
    };
  };
  const settleBody = (action: unknown) => settleBodyFor(requirements, action);
  const em = deps.orm.em.fork() as EntityManager;
  // A refund is recorded with the nonce it is sent with (refunds.ts): the same refund again is
  // sent again with it, and the facilitator answers the first refund's settlement.
  const refundKey =
    payload.type === 'refund'
      ? {
          network: config.network,
          asset: requirements.asset,
          payer: offer.payer,
          nonce: refundPaymentNonce(offer.nonce, payload.amount),
          tenantId: call.tenantId,
          agentId: call.agentId,
          amount: requirements.maxAmountRequired,
        }
      : null;
  let refundInDoubt = false;
  /** When this call asked for its channel's lease; what its facilitator calls may take of it (store.ts). */
  let leasedAt = Date.now();
  const settleDeadline = () => settleDeadlineUnderLease(leasedAt, Date.now(), config.settlementTimeoutMs);
  /** The refund bound under `binding` is known (a failure to write it leaves it to be asked for again). */
  const refundKnown = (binding: string) =>
    store
      .refundKnown(channelId, binding)
      .catch((err: unknown) =>
        deps.log.warn({ channelId, err: errorKind(err) }, 'could not record that a refund is known'),
      );
  /**
   * Sends the refund completed with `refundNonce`; throws its answer (ChannelRefunded) or its
   * refusal. It is written on the channel first (`refund_in_doubt`), so that its outcome stays to
   * be learned until its answer says it landed, whatever happens to this process meanwhile; a
   * refusal ends that too, unless the same refund was in doubt before (its first sending may
   * still land, whatever this one was told).
   */
  const refund = async (
    action: BatchSettlementPayload,
    refundNonce: bigint,
    lease: ChannelLease,
    before: RefundInDoubt | null,
  ): Promise<never> => {
    const completed = { ...action, refundNonce: refundNonce.toString() };
    const binding = refundKey!.nonce;
    // Whom to send it to first, and whether the lease leaves time to: a refund that cannot be
    // sent leaves nothing in doubt.
    const target = await facilitator();
    if (settleDeadline() === null) throw new PaymentStillSettling();
    const written = await store
      .refundInDoubt(lease, {
        binding,
        refundNonce: refundNonce.toString(),
        ceiling: action.voucher.maxClaimableAmount,
        action: completed,
        requirements,
        since: new Date().toISOString(),
      })
      .then(
        () => true,
        (err: unknown) => {
          deps.log.warn({ channelId, err: errorKind(err) }, 'could not record a refund before sending it');
          return false;
        },
      );
    // Not sent unless its doubt is on record: the payer sends it again.
    if (!written) throw new PaymentStillSettling();
    // The write took its time from the lease too: too little left now, and it is not sent here
    // but stays in doubt, sent by the channel's next payment (settleDoubt).
    const sending = settleDeadline();
    if (sending === null) {
      refundInDoubt = true;
      throw new PaymentStillSettling();
    }
    const outcome = await client.settleChannel(target, settleBody(completed), sending);
    if (!outcome.ok && outcome.error === 'settlement_unavailable') {
      // It may still land: the channel stays taken for its lease, so no call is served meanwhile
      // that the refund would leave unclaimed; the payer's retry finds it done or sends it again.
      // Past the lease, the channel's next payment first asks for it again (settleDoubt).
      refundInDoubt = true;
      throw new PaymentStillSettling();
    }
    if (!outcome.ok) {
      if (before?.binding !== binding) await refundKnown(binding);
      throw refused(outcome.reason ?? outcome.error, outcome.error);
    }
    const state = outcome.channelState;
    if (state) await store.mirror(channelId, fromState(state), new Date());
    await refundKnown(binding);
    throw new ChannelRefunded(
      encodeBase64Json({
        success: true,
        transaction: outcome.transaction,
        network: caip2Network(config.domain.chainId),
        payer: offer.payer,
        amount: outcome.amount,
        ...(state ? { extra: { channelState: { channelId, ...state } } } : {}),
      }),
      outcome.amount,
      outcome.transaction,
    );
  };
  /**
   * The channel's state once a refund sent earlier (`doubt`), whose outcome was not known, is: it
   * landed (the chain used its refund nonce), or the facilitator, asked for it again with its
   * refund nonce (it answers the same refund, never a second; one that never reached it runs
   * now), answers that it did. It is asked for again only while what it claims is still the
   * channel's charged total (else it would return escrow that backs later charges). Still not
   * known (no answer, a refusal, charges since): PaymentStillSettling, nothing admitted, until
   * REFUND_DOUBT_MAX_MS after it was sent, when it is let go (a refund the facilitator gave up).
   */
  const settleDoubt = async (channel: ChannelRow, doubt: RefundInDoubt): Promise<ChannelRow> => {
    if (channel.refundNonce > BigInt(doubt.refundNonce)) {
      await refundKnown(doubt.binding);
      return channel;
    }
    const expired = Date.now() - Date.parse(doubt.since) > REFUND_DOUBT_MAX_MS;
    // Its facilitator out of reach (no settlement configured, its credential unreadable) is an
    // outcome not known either.
    const target = await facilitator().catch(() => null);
    const deadline = settleDeadline();
    const outcome =
      target && deadline !== null && channel.charged === BigInt(doubt.ceiling)
        ? await client.settleChannel(target, settleBodyFor(doubt.requirements, doubt.action), deadline)
        : null;
    deps.log.info(
      { channelId, landed: outcome?.ok ?? null, expired },
      'a refund whose outcome was not known asked for',
    );
    if (!outcome?.ok) {
      if (!expired) throw new PaymentStillSettling();
      const read = await readAgain(store, config, channelId);
      await refundKnown(doubt.binding);
      return read;
    }
    // The facilitator's state after it, not a node's read that may answer from before it; without
    // it, a read that shows its nonce used. The doubt ends only once the row holds that state.
    const after = outcome.channelState
      ? await store.mirror(channelId, fromState(outcome.channelState), new Date())
      : await readAgain(store, config, channelId);
    if (after.refundNonce <= BigInt(doubt.refundNonce)) throw new PaymentStillSettling();
    await refundKnown(doubt.binding);
    return after;
  };
  if (offer.signed && !(await offer.signed())) throw refused('invalid_batch_settlement_evm_voucher_signature');
  // Any other payment takes the channel for itself: a hold of this process's lets it go first.
  await owners?.relinquish(channelId, CHANNEL_WAIT_MS);

  // A voucher or refund of a channel found unfunded moments ago: refused with no chain read and
  // no row, unless a deposit (through another replica) has funded it since, or (a refund) it was
  // sent before: a full refund leaves the channel unfunded, and its retry gets its answer.
  if (
    payload.type !== 'deposit' &&
    unfunded.has(channelId) &&
    !(await store.funded(channelId)) &&
    !(refundKey && (await earlierRefundNonce(em, refundKey)) !== null)
  )
    throw refused('invalid_batch_settlement_evm_channel_not_found');
  if (payload.type === 'deposit') unfunded.delete(channelId);

  leasedAt = Date.now();
  const leased = await leaseWithin(store, {
    ...leaseOf(channelId, call, payload),
    ...(payload.type === 'voucher' && !offer.paymentId
      ? { bind: voucherBinding(config, call, offer, BigInt(payload.voucher.maxClaimableAmount), ceiling) }
      : {}),
  });
  if (leased === 'foreign') throw refused('channel_of_another_tenant', CHANNEL_ELSEWHERE);
  if (leased === 'busy') throw new ChannelBusy(entries);
  const { lease } = leased;
  let admitted = false;
  try {
    let channel = leased.channel;
    if (stale(channel) || payload.type !== 'voucher' || channel.refundInDoubt)
      channel = await readAgain(store, config, channelId);
    // A refund sent earlier may still land, claiming what was charged then and returning the rest:
    // nothing is admitted until its outcome is known (the same refund sent again is answered below).
    const doubt = channel.refundInDoubt;
    if (doubt && doubt.binding !== refundKey?.nonce) channel = await settleDoubt(channel, doubt);
    // A refund sent before (refunds.ts) whose nonce the chain has used since was done: sent again
    // with it, the facilitator answers that refund's settlement and moves nothing. One not done
    // (refused, or its outcome not known) is checked below as a new one, under this lease, and
    // sent with its nonce again: a payload kept from before calls charged since is refused, never
    // sent to claim less than the gateway charged.
    // The same refund in doubt: the nonce it was sent with is the doubt's (its binding's record
    // of it may have been purged since).
    const earlier = !refundKey
      ? null
      : doubt?.binding === refundKey.nonce
        ? BigInt(doubt.refundNonce)
        : await earlierRefundNonce(em, refundKey);
    if (earlier === 'foreign') throw refused('refund_of_another_tenant', CHANNEL_ELSEWHERE);
    if (earlier !== null && channel.refundNonce > earlier) return await refund(payload, earlier, lease, doubt);
    // Nothing in escrow and no deposit coming: refused before anything else is asked of it (and
    // remembered for a while); its row, if this call made it, is not kept (store.letGo).
    if (payload.type !== 'deposit' && channel.balance === 0n) {
      unfunded.set(channelId, true);
      throw refused('invalid_batch_settlement_evm_channel_not_found');
    }
    const signed = BigInt(payload.voucher.maxClaimableAmount);
    const expected = payload.type === 'refund' ? channel.charged : channel.charged + ceiling;
    refuseByState(deps.log, call, entries, refused, channel, payload.type, signed, expected);
    const expectation = {
      chainId: config.domain.chainId,
      asset: requirements.asset,
      payTo: requirements.payTo,
      receiverAuthorizer: terms.receiverAuthorizer,
      withdrawDelay: terms.withdrawDelay,
      ceiling: payload.type === 'refund' ? 0n : ceiling,
    };
    const state = {
      balance: channel.balance,
      totalClaimed: channel.totalClaimed,
      chargedCumulativeAmount: channel.charged,
    };

    if (payload.type === 'refund') {
      const cause = escrowCause(payload.type, signed, channel);
      if (cause) throw refused(cause);
      // Recorded under the lease: the same refund sent twice at once is recorded once.
      const refundNonce =
        earlier ??
        (await recordRefund(
          em,
          { ...refundKey!, paymentId: offer.paymentId },
          { payment: offer.payment, requirements },
          channel.refundNonce,
        ));
      if (refundNonce === 'foreign') throw refused('refund_of_another_tenant', CHANNEL_ELSEWHERE);
      // Awaited here, so the lease is held until the refund is answered (the finally below).
      return await refund(payload, refundNonce, lease, doubt);
    }

    let transaction: string | null = null;
    let deposited = '';
    if (payload.type === 'voucher') {
      const cause = escrowCause(payload.type, signed, channel);
      if (cause) throw refused(cause);
    } else {
      const checked = await verifyDeposit(
        payload,
        {
          ...expectation,
          token: config.domain,
          now: Math.floor(Date.now() / 1000),
          marginSeconds: config.validityMarginSeconds,
          ...(typeof requirements.extra?.minDeposit === 'string'
            ? { minDeposit: BigInt(requirements.extra.minDeposit) }
            : {}),
        },
        state,
      );
      if (!checked.ok) throw refused(checked.cause);
      const target = await facilitator();
      // Nothing sent when the lease has too little left (the payer sends the same payment again).
      const deadline = settleDeadline();
      if (deadline === null) throw new PaymentStillSettling();
      const outcome = await client.settleChannel(target, settleBody(payload), deadline);
      if (!outcome.ok && outcome.error === 'settlement_unavailable') throw new PaymentStillSettling();
      if (!outcome.ok) throw refused(outcome.reason ?? outcome.error, outcome.error);
      transaction = outcome.transaction || null;
      deposited = outcome.amount;
      let after: OnChainChannel;
      // The facilitator's state is the channel's after the deposit landed, as of its answer.
      const readAt = new Date();
      try {
        after = outcome.channelState
          ? fromState(outcome.channelState)
          : await readChannel(config.contractSignatures, channelId);
      } catch {
        // The deposit landed but the channel's state after it is not known now: the payer resends
        // the same payment, whose deposit the facilitator answers again without moving anything.
        throw new PaymentStillSettling();
      }
      channel = await store.mirror(channelId, after, readAt);
    }

    // The call's binding, named by its lease: a voucher's ceiling may come again (a call charged
    // less than its ceiling leaves the next voucher at the same cumulative ceiling), and it is the
    // channel's charged total, under the lease, that keeps one voucher from paying twice.
    const nonce = `${offer.nonce}-${lease.token}`;
    const recording = lease.binding
      ? { state: 'new' }
      : await recordPayment(em, {
          network: config.network,
          asset: requirements.asset,
          payer: offer.payer,
          nonce,
          tenantId: call.tenantId,
          agentId: call.agentId,
          amount: requirements.maxAmountRequired,
          paymentId: offer.paymentId,
          signedPayment: keptVoucher(payload.voucher, lease.token),
        });
    if (recording.state !== 'new' && recording.state !== 'resumed')
      throw new PaymentRefused('payment already used', entries);
    admitted = true;
    return {
      nonce,
      channel: { id: channelId, leaseToken: lease.token },
      transaction,
      receipt: receiptOf(config, offer.payer, channel, ceiling, transaction, deposited),
    };
  } finally {
    if (!admitted && !refundInDoubt) await store.letGo(lease as ChannelLease).catch(() => undefined);
  }
}

/** What a call's binding keeps of its payment: its voucher and its lease (entity.ts). */
function keptVoucher(
  voucher: { channelId: string; maxClaimableAmount: string; signature: string },
  lease: string,
): KeptVoucher {
  const { channelId, maxClaimableAmount, signature } = voucher;
  return { payment: { payload: { voucher: { channelId, maxClaimableAmount, signature } } }, channelLease: lease };
}

/**
 * A voucher's payment binding, as the call's record below would write it, for its lease to record
 * when the channel shows it admissible (store.ts): a voucher call then costs one statement less.
 */
function voucherBinding(
  config: PaymentConfig,
  call: { tenantId: string; agentId: string },
  offer: ChannelOffer,
  signed: bigint,
  ceiling: bigint,
): (token: string) => LeaseBinding {
  const { requirements } = offer;
  return (token) => ({
    network: config.network,
    asset: requirements.asset,
    payer: offer.payer,
    nonce: `${offer.nonce}-${token}`,
    tenantId: call.tenantId,
    agentId: call.agentId,
    amount: requirements.maxAmountRequired,
    signed,
    ceiling,
    freshSeconds: MIRROR_FRESH_MS / 1000,
    signedPayment: keptVoucher((offer.payment.payload as BatchSettlementPayload).voucher, token),
  });
}

/**
 * The SettleResponse of an admitted call: the charge it will be committed at when served (its
 * ceiling; a call whose upstream fails is charged nothing, and the payer's next voucher is then
 * answered the corrective 402) and the channel's state after it.
 */
function receiptOf(
  config: PaymentConfig,
  payer: string,
  channel: ChannelRow,
  ceiling: bigint,
  transaction: string | null,
  deposited: string,
): SettleResponseV2 {
  const channelState: ChannelState = channelStateOf(channel, channel.charged + ceiling);
  return {
    success: true,
    transaction: transaction ?? '',
    network: caip2Network(config.domain.chainId),
    payer,
    amount: deposited,
    extra: { chargedAmount: ceiling.toString(), channelState },
  };
}
