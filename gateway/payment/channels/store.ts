// The payment channels' rows (migration Migration20261206160000_payment_channels), as plain SQL:
// the guarantees are in the WHERE clauses, so they hold across API replicas.
// - lease: a call holds its channel from admission until its charge is committed (or its lease
//   runs out: a process that died holding it does not hold it for ever). Only the tenant that
//   first saw a channel may use it. A voucher's payment binding is recorded in the lease's own
//   statement when the leased row already shows it admissible (a round trip less per paid call);
//   the admission still decides, and a binding it does not admit goes with the lease's release;
// - mirror: what the chain (or the facilitator's answer) says of the channel;
// - commit: the call's charge joins the charged total, at most the ceiling the payer signed for
//   it, its voucher becomes the channel's latest, and the lease is let go; the invocation's
//   charge is recorded in the same statement, once.
import { randomUUID } from 'node:crypto';
import { newId } from '../../../lib/ids.ts';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { ChallengeEntry } from '../../../x402/schemas.ts';
import type { ChannelConfig } from '../../../x402/schemes/batch-settlement/schemas.ts';
import type { OnChainChannel } from '../schemes/batch-settlement/chain.ts';
import { CHANGE_FEED_CHANNEL, FEED_NOTICE } from '../../db/change-feed.ts';
import { numbered, type StatementPool } from '../../db/statement-pool.ts';
import { COMPLETION_SET } from '../../invocations/stream-records.ts';

/** A channel as its admission reads it. */
export type ChannelRow = {
  id: string;
  charged: bigint;
  signedMaxClaimable: bigint;
  signature: string | null;
  balance: bigint;
  totalClaimed: bigint;
  withdrawRequestedAt: number;
  refundNonce: bigint;
  /** When the on-chain fields were last read; null: never (a channel first seen now). */
  syncedAt: Date | null;
  /** A refund sent whose outcome is not known (REFUND_IN_DOUBT), else null. */
  refundInDoubt: RefundInDoubt | null;
};

/** A cooperative refund sent to the facilitator, as kept on its channel until its outcome is known. */
export type RefundInDoubt = {
  /** Its payment binding's nonce (channels/refunds.ts): the same refund sent again has the same. */
  binding: string;
  /** The channel's refund nonce it was sent with: the chain's past it, it landed. */
  refundNonce: string;
  /** The charged total it claims (its voucher's ceiling). */
  ceiling: string;
  /** Its payload as completed and the terms it was sent under, to send it again with. */
  action: Record<string, unknown>;
  requirements: ChallengeEntry;
  /** When it was first sent (ISO). */
  since: string;
};

/** The call's hold on its channel; `binding`: the nonce of the payment binding its lease recorded. */
export type ChannelLease = { channelId: string; token: string; binding?: BindingKey };

type BindingKey = { network: string; asset: string; payer: string; nonce: string };

/**
 * A voucher's payment binding (binding.ts's row, unbound, without a payment identifier), to be
 * recorded with the lease when the channel's mirrored state (fresh within `freshSeconds`) shows
 * the voucher admissible: its ceiling `signed` is the charged total plus `ceiling`, within the
 * escrow, above the claimed total.
 */
export type LeaseBinding = BindingKey & {
  tenantId: string;
  agentId: string;
  amount: string;
  signed: bigint;
  ceiling: bigint;
  freshSeconds: number;
  signedPayment: unknown;
};

type Raw = Record<string, unknown>;

function rowOf(r: Raw): ChannelRow {
  return {
    id: r.id as string,
    charged: BigInt(r.charged_cumulative as string),
    signedMaxClaimable: BigInt(r.signed_max_claimable as string),
    signature: (r.signature as string | null) ?? null,
    balance: BigInt(r.balance as string),
    totalClaimed: BigInt(r.total_claimed as string),
    withdrawRequestedAt: Number(r.withdraw_requested_at),
    refundNonce: BigInt(r.refund_nonce as string),
    syncedAt: r.onchain_synced_at ? new Date(r.onchain_synced_at as string) : null,
    refundInDoubt: (r.refund_in_doubt as RefundInDoubt | null | undefined) ?? null,
  };
}

const COLUMNS = `id, charged_cumulative::text, signed_max_claimable::text, signature, balance::text,
  total_claimed::text, withdraw_requested_at, refund_nonce::text, onchain_synced_at, refund_in_doubt`;
// The same, of `channels c` in a statement that joins other rows of those names.
const CHANNEL_COLUMNS = `c.id, c.charged_cumulative::text, c.signed_max_claimable::text, c.signature, c.balance::text,
  c.total_claimed::text, c.withdraw_requested_at, c.refund_nonce::text, c.onchain_synced_at, c.refund_in_doubt`;

const LEASE = `
  insert into channels (id, tenant_id, agent_id, payer, receiver, receiver_authorizer, config, busy_until, busy_invocation)
  values (?, ?, ?, ?, ?, ?, ?::jsonb, now() + make_interval(secs => ?), ?)
  on conflict (id) do update set busy_until = excluded.busy_until, busy_invocation = excluded.busy_invocation, updated_at = now()
   where channels.tenant_id = excluded.tenant_id and (channels.busy_until is null or channels.busy_until < now())
  returning ${COLUMNS}`;

// The lease and, when the leased row shows the voucher admissible, its binding, in one statement.
const LEASE_BINDING = `
  with leased as (${LEASE.replace(`returning ${COLUMNS}`, 'returning *')}),
  bound as (
    insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, signed_payment, created_at, updated_at)
    select ?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?::jsonb, now(), now() from leased l
     where l.onchain_synced_at > now() - make_interval(secs => ?)
       and l.charged_cumulative + ?::numeric = ?::numeric
       and l.balance > 0 and ?::numeric <= l.balance and ?::numeric > l.total_claimed
    on conflict (network, asset, payer, nonce) do nothing
    returning id)
  select ${COLUMNS}, exists (select 1 from bound) as bound from leased`;

/** The change-feed key (this prefix and a channel id) by which a process asks for a channel another holds (owners.ts). */
export const CHANNEL_WANTED = `${FEED_NOTICE}channel-wanted:`;
/** The prefix of the lease tokens of channels held between calls (owners.ts): a charge's commit by anyone else never lets such a lease go. */
const HOLD = 'hold-';

// Whose the channel is; a channel of the caller's tenant held by another call is asked for
// (owners.ts: a process that keeps it between its calls lets it go), when `ask`.
const OWNER = `select tenant_id, case when ?::boolean and tenant_id = ? then pg_notify(?, ?) end
  from channels where id = ?`;

const RELEASE = `update channels set busy_until = null, busy_invocation = null, updated_at = now()
  where id = ? and busy_invocation = ?`;

// The binding a lease recorded with it (LEASE_BINDING), when its call was refused: never bound.
const UNBIND = `delete from payment_claims where network = ? and asset = ? and payer = ? and nonce = ?
  and invocation_id is null`;

// The charged total is never below what was claimed on chain (a channel first seen here, or
// whose charges were lost, starts from there: the spec's server-state-loss baseline).
// Written as the other mirrors of the chain are (channel-claims/): what only ever rises on chain
// (the claimed total, the refund nonce, and so the charged total's floor) only rises here; what
// may go either way (the escrow, a pending withdrawal) is taken only from a read at least as new
// as the one the row holds (`onchain_synced_at`, the moment its read began), so a read that
// answers late (a claims round's, an admission's) never moves the row back.
const MIRROR = `update channels set
    total_claimed = greatest(total_claimed, ?::numeric),
    refund_nonce = greatest(refund_nonce, ?::numeric),
    charged_cumulative = greatest(charged_cumulative, ?::numeric),
    balance = case when onchain_synced_at is null or onchain_synced_at <= ?::timestamptz then ?::numeric else balance end,
    withdraw_requested_at = case when onchain_synced_at is null or onchain_synced_at <= ?::timestamptz then ? else withdraw_requested_at end,
    onchain_synced_at = greatest(onchain_synced_at, ?::timestamptz),
    updated_at = now()
  where id = ? returning ${COLUMNS}`;

// A row that holds nothing (never funded as last read, never paid from, nothing claimed or
// refunded) is not kept past the call that made it: a made-up or unfunded channel leaves no row.
const FORGET = `delete from channels
  where id = ? and busy_invocation = ? and signature is null and charged_cumulative = 0 and balance = 0
    and total_claimed = 0 and refund_nonce = 0
  returning id`;

const FUNDED = `select 1 from channels where id = ? and balance > 0`;

// A refund about to be sent, written while its lease holds the channel (a refund in doubt kept
// from before keeps its first `since`); and its doubt ended (it landed, or is known not to), only
// for that refund (by its binding).
const REFUND_IN_DOUBT = `update channels set refund_in_doubt = ?::jsonb || jsonb_build_object('since',
    case when refund_in_doubt->>'binding' = ?::jsonb->>'binding' then refund_in_doubt->>'since' else ?::jsonb->>'since' end),
    updated_at = now()
  where id = ? and busy_invocation = ? returning id`;
const REFUND_KNOWN = `update channels set refund_in_doubt = null, updated_at = now()
  where id = ? and refund_in_doubt->>'binding' = ?`;

export type LeaseOutcome = { lease: ChannelLease; channel: ChannelRow } | 'busy' | 'foreign';

export function createChannelStore(orm: MikroORM) {
  const execute = (sql: string, params: unknown[]) => orm.em.getConnection().execute<Raw[]>(sql, params);
  return {
    /** Takes the channel for one call (creating its row when new), unless another call holds it or another tenant owns it. */
    async lease(input: {
      channelId: string;
      tenantId: string;
      agentId: string;
      config: ChannelConfig;
      seconds: number;
      /** The voucher's binding, named by the lease's token, recorded with it when admissible. */
      bind?: (token: string) => LeaseBinding;
      /** To be held between calls (owners.ts): a hold's token. */
      hold?: boolean;
      /** Found held by another call of the tenant: ask its holder for it (once per waiting call). */
      ask?: boolean;
    }): Promise<LeaseOutcome> {
      const token = `${input.hold ? HOLD : ''}${randomUUID()}`;
      const { config } = input;
      const leaseParams = [
        input.channelId,
        input.tenantId,
        input.agentId,
        config.payer.toLowerCase(),
        config.receiver.toLowerCase(),
        config.receiverAuthorizer.toLowerCase(),
        JSON.stringify(config),
        input.seconds,
        token,
      ];
      const binding = input.bind?.(token);
      const rows = binding
        ? await execute(LEASE_BINDING, [
            ...leaseParams,
            newId('pay'),
            binding.tenantId,
            binding.agentId,
            binding.network,
            binding.asset,
            binding.payer,
            binding.nonce,
            binding.amount,
            JSON.stringify(binding.signedPayment),
            binding.freshSeconds,
            binding.ceiling.toString(),
            binding.signed.toString(),
            binding.signed.toString(),
            binding.signed.toString(),
          ])
        : await execute(LEASE, leaseParams);
      if (rows[0]) {
        const { network, asset, payer, nonce } = binding ?? {};
        const bound =
          binding && rows[0].bound === true
            ? { network: network!, asset: asset!, payer: payer!, nonce: nonce! }
            : undefined;
        return {
          lease: { channelId: input.channelId, token, ...(bound ? { binding: bound } : {}) },
          channel: rowOf(rows[0]),
        };
      }
      const [owner] = await execute(OWNER, [
        input.ask === true,
        input.tenantId,
        CHANGE_FEED_CHANNEL,
        `${CHANNEL_WANTED}${input.channelId}`,
        input.channelId,
      ]);
      return owner && owner.tenant_id !== input.tenantId ? 'foreign' : 'busy';
    },

    /**
     * Lets the channel go without a charge after a call refused at its admission, with the binding
     * its lease recorded: its row goes too when it holds nothing (FORGET), else it is only released.
     */
    async letGo(lease: ChannelLease): Promise<void> {
      const { binding: b } = lease;
      if (b) await execute(UNBIND, [b.network, b.asset, b.payer, b.nonce]);
      const forgotten = await execute(FORGET, [lease.channelId, lease.token]);
      if (forgotten.length === 0) await execute(RELEASE, [lease.channelId, lease.token]);
    },

    /**
     * Records the refund about to be sent, its outcome not known until its answer (under the
     * lease that sends it); throws when that cannot be written or the lease is no longer this call's.
     */
    async refundInDoubt(lease: ChannelLease, refund: RefundInDoubt): Promise<void> {
      const json = JSON.stringify(refund);
      const rows = await execute(REFUND_IN_DOUBT, [json, json, json, lease.channelId, lease.token]);
      if (rows.length === 0) throw new Error('channel lease lost');
    },

    /** The refund bound under `binding` is known to have landed, or never to. */
    async refundKnown(channelId: string, binding: string): Promise<void> {
      await execute(REFUND_KNOWN, [channelId, binding]);
    },

    /** Whether the channel's row says it is funded (as last mirrored). */
    async funded(channelId: string): Promise<boolean> {
      return (await execute(FUNDED, [channelId])).length > 0;
    },

    /**
     * Records the channel's on-chain state as read from `readAt` on (when the read began, or when
     * a facilitator's answer of the state after its transaction came); answers the row, which
     * keeps what a newer read wrote.
     */
    async mirror(channelId: string, state: OnChainChannel, readAt: Date): Promise<ChannelRow> {
      const at = readAt.toISOString();
      const [row] = await execute(MIRROR, [
        state.totalClaimed.toString(),
        state.refundNonce.toString(),
        state.totalClaimed.toString(),
        at,
        state.balance.toString(),
        at,
        state.withdrawRequestedAt,
        at,
        channelId,
      ]);
      return rowOf(row!);
    },
  };
}

export type ChannelStore = ReturnType<typeof createChannelStore>;

// A completed call's charge, committed once (its invocation still due): the channel's charged
// total grows by the charge while it stays within the highest voucher the payer signed on the
// channel (this call's, kept on its binding, or a later one's: a process that held the channel
// between calls may have served the next before this charge was written, and the due-charges
// round commits the calls of a process that died in any order), the voucher becomes the channel's
// latest when it is higher, and the call's lease is let go (another call's is kept) or, `keep`
// (the process that holds the channel between calls, owners.ts), renewed. The invocation is
// recorded settled (committed to its channel: claimed on chain later) or failed
// (`voucher_exceeded`: the channel moved on past every voucher, the seller's loss), and its
// binding follows, its signed payment let go. Answers the channel's row as the commit left it,
// and whether the lease was still the call's.
// The charge of a call whose row is due (`source` names it `i`, `charge` its amount), with its
// binding and its channel, both locked.
const due = (charge: string, source: string, where: string) => `due as (
    select i.id, i.payment_channel as channel, ${charge} as charge,
           (b.signed_payment->'payment'->'payload'->'voucher'->>'maxClaimableAmount')::numeric as max_claimable,
           b.signed_payment->'payment'->'payload'->'voucher'->>'signature' as signature,
           b.signed_payment->>'channelLease' as lease,
           c.busy_invocation is not distinct from b.signed_payment->>'channelLease' as held,
           c.charged_cumulative + ${charge}
             <= greatest(c.signed_max_claimable,
                         (b.signed_payment->'payment'->'payload'->'voucher'->>'maxClaimableAmount')::numeric) as fits,
           c.signed_max_claimable as signed_max
      ${source}
      join payment_claims b on b.invocation_id = i.id
      join channels c on c.id = i.payment_channel
     where ${where} and i.payment_channel is not null
       and (i.payment_settlement is null or i.payment_settlement = 'settling')
     for update of i, c)`;

// The charge committed to the channel and the call recorded with it (`recordedSet`: what else
// the row's update sets), from `due`.
const committing = (recordedSet: string, recordedFrom: string) => `
  -- A voucher becomes the channel's latest only through a call charged something under it: a call
  -- charged nothing may never have had its signature checked (its row written as it was checked).
  voucher as (select d.*, d.fits and d.charge > 0 and d.max_claimable > d.signed_max as adopt from due d),
  committed as (
    update channels c
       set charged_cumulative = c.charged_cumulative + case when d.fits then d.charge else 0 end,
           signature = case when d.adopt then d.signature else c.signature end,
           signed_max_claimable = case when d.adopt then d.max_claimable else c.signed_max_claimable end,
           last_request_at = case when d.fits then now() else c.last_request_at end,
           busy_until = case when not d.held then c.busy_until
                             when ?::boolean then now() + make_interval(secs => ?)
                             when d.lease like '${HOLD}%' then c.busy_until end,
           busy_invocation = case when d.held and not ?::boolean and d.lease not like '${HOLD}%' then null
                                  else c.busy_invocation end,
           updated_at = now()
      from voucher d
     where c.id = d.channel and (d.fits or d.held)
    returning ${CHANNEL_COLUMNS}),
  recorded as (
    update invocations i
       set ${recordedSet}
           payment_settlement = case when d.fits then 'settled' else 'failed' end,
           payment_settle_error = case when d.fits then null else 'voucher_exceeded' end
      from due d${recordedFrom} where i.id = d.id
    returning i.id),
  bound as (
    update payment_claims set status = case when (select fits from due) then 'settled' else 'unsettled' end,
           signed_payment = null, updated_at = now()
     where invocation_id in (select id from recorded))
  select (select count(*)::int from recorded) as recorded, (select fits from due) as committed,
         (select held from due) as held, committed.* from (select 1) one left join committed on true`;

const COMMIT = `with ${due(
  `coalesce(i.payment_charge, '0')::numeric`,
  'from invocations i',
  `i.id = ? and i.status in ('succeeded', 'failed')`,
)}, ${committing('updated_at = now(),', '')}`;

// A held channel's call completed and its charge committed in one statement, as COMMIT commits
// it once the row has completed: the row's completion ($1, the recorder's record of it) is read
// as `r`, and the update that records the charge also writes the completion. One round trip and
// one commit after each voucher-paid answer instead of two (the completion, then the charge):
// on two shared vCPUs the second cost the next voucher call ~0.8 ms (docs/BENCHMARKS.md). Only a
// row still running (or failed by the lost-stream sweep's guess, its charge not settled) is
// completed, as the recorder's completion does.
const COMPLETE_AND_COMMIT = `with ${due(
  `coalesce(r.payment_charge, '0')::numeric`,
  'from json_populate_record(null::invocations, $1::json) r join invocations i on i.id = r.id',
  `r.status in ('succeeded', 'failed')
       and (i.status = 'running' or (i.error_class = 'gateway_lost' and i.payment_settlement is null))`,
)}, ${committing(`${COMPLETION_SET},`, ', json_populate_record(null::invocations, $1::json) r')}`;

/** How long a call holds its channel without a sign of life (a process that died lets it go then). */
export const LEASE_SECONDS = 120;
/** What a call's lease keeps after a facilitator call sent under it: the chain read and the accept that follow a deposit. */
const LEASE_AFTER_SETTLE_MS = 20_000;
/** Less of the lease left than this, and nothing is sent under it (the payer sends the same payment again). */
const LEASE_LEAST_SETTLE_MS = 2_000;

/**
 * The deadline of a facilitator call (a deposit, a refund) sent under a call's channel lease
 * asked for at `leasedAt` (this process's clock, read before the lease was asked for): the
 * configured one, shortened so that the answer comes LEASE_AFTER_SETTLE_MS before the lease can
 * lapse. A deposit that landed after its lease lapsed would answer its payer 503 instead of the
 * call it paid for; an answer not come by then is an outcome not known (the payer's retry is
 * answered the same settlement). Null: too little is left to send anything.
 */
export function settleDeadlineUnderLease(leasedAt: number, now: number, configuredMs: number): number | null {
  const left = leasedAt + LEASE_SECONDS * 1000 - LEASE_AFTER_SETTLE_MS - now;
  return left < LEASE_LEAST_SETTLE_MS ? null : Math.min(configuredMs, left);
}
/**
 * The lease a transactional call holds once accepted: its answer waits in its workflow's queue and
 * attempts, which may outlast LEASE_SECONDS while nothing renews it, and a lapsed lease would let
 * the same voucher ceiling be admitted again before the first call's charge is committed (one
 * voucher, two calls served). Its commit, or its row closed unserved, lets it go (binding.ts
 * releasingPayments). Admitted, it holds LEASE_SECONDS until the accept commit extends it
 * (keepAcceptedLease): a process that dies between the two keeps the payer's channel that long.
 */
export const TRANSACTIONAL_LEASE_SECONDS = 600;

const KEEP_ACCEPTED = `update channels set busy_until = greatest(busy_until, now() + make_interval(secs => ?)),
    updated_at = now()
  where id = ? and busy_invocation = ? and busy_until > now() returning id`;

/**
 * Extends an admitted transactional call's lease for its queue (TRANSACTIONAL_LEASE_SECONDS), in
 * the accept commit's transaction (`em`); false when the lease is no longer the call's (it lapsed
 * and may have been taken: the call must not be accepted).
 */
export async function keepAcceptedLease(
  em: EntityManager,
  channel: { id: string; leaseToken: string },
): Promise<boolean> {
  // em.execute runs in the transaction em holds.
  const rows = await em.execute<Raw[]>(KEEP_ACCEPTED, [TRANSACTIONAL_LEASE_SECONDS, channel.id, channel.leaseToken]);
  return rows.length === 1;
}
/**
 * A data-modifying CTE, `kept`, for a statement that lets a transactional call be forwarded (its
 * attempt counted): the channel lease the call's binding names is renewed for `?` seconds while
 * it is still the call's, and `kept` holds its channel then. A lease that lapsed while the call
 * waited in its queue and was taken since by another call (admitted against the same charged
 * total: one voucher ceiling, two calls) is not: the call must not be forwarded. Its parameters:
 * the seconds, then the invocation's id.
 */
export const KEEP_CALL_LEASE = `kept as (
    update channels c set busy_until = greatest(c.busy_until, now() + make_interval(secs => ?)), updated_at = now()
      from invocations i join payment_claims b on b.invocation_id = i.id
     where i.id = ? and c.id = i.payment_channel and c.busy_invocation = b.signed_payment->>'channelLease'
    returning c.id)`;

/** How often a running call renews its hold (a stream may run far longer than the lease). */
export const LEASE_RENEW_EVERY_MS = 30_000;
/**
 * The lease of a channel held between calls (owners.ts): short, so a process that dies holding a
 * channel idle (no call of its running, none for the lost-stream sweep to find) keeps the payer's
 * calls elsewhere waiting this long at most; its holder renews every HOLD_RENEW_EVERY_MS.
 */
export const HOLD_LEASE_SECONDS = 15;
export const HOLD_RENEW_EVERY_MS = 3_000;

// Leases renewed together (all the holds of one process), one statement for all of them, their
// rows locked in the order of their ids. A renewal that deadlocks with another writer of many
// channel rows (the claims' records, the chain's mirror) fails alone: renewed next period.
const RENEW = `
  with mine as (
    select c.id from channels c join jsonb_to_recordset(?::jsonb) as h(id text, token text)
        on c.id = h.id and c.busy_invocation = h.token
     order by c.id for update of c)
  update channels c set busy_until = now() + make_interval(secs => ?), updated_at = now()
    from mine where c.id = mine.id returning c.id`;

/**
 * Renews for `seconds` the leases of the channels held under these tokens (a running call's, the
 * holds of a process); answers the ids whose lease was still theirs.
 */
export async function renewChannelLeases(
  orm: MikroORM,
  leases: Array<{ id: string; token: string }>,
  seconds: number,
): Promise<Set<string>> {
  if (leases.length === 0) return new Set();
  const rows = await orm.em.getConnection().execute<Raw[]>(RENEW, [JSON.stringify(leases), seconds]);
  return new Set(rows.map((r) => r.id as string));
}

/**
 * Lets a call's channel go when the call is refused after its admission and before its row holds
 * its payment (its row not written, its binding not made): nothing is charged, and the payer's
 * next call is admitted at once instead of after LEASE_SECONDS. A lease another call took since
 * is kept. (A row closed without reaching its upstream lets it go with its payment: binding.ts.)
 */
export async function releaseChannelLease(
  orm: MikroORM,
  channel: { id: string; leaseToken: string } | null | undefined,
): Promise<void> {
  // Never throws: a release that fails leaves a lease that lapses by itself (LEASE_SECONDS, a
  // hold's HOLD_LEASE_SECONDS).
  if (channel)
    await orm.em
      .getConnection()
      .execute(RELEASE, [channel.id, channel.leaseToken])
      .catch(() => undefined);
}

/** What a charge's commit did: whether it was recorded now, fitted a voucher, found the lease the call's, and the channel after. */
export type CommittedCharge = { recorded: boolean; committed: boolean; held: boolean; row: ChannelRow | null };

// Prepared once per connection: every voucher call commits a charge, and PostgreSQL parsing and
// planning this statement afresh cost it about 0.8 ms a call, four times its execution.
const COMMIT_PREPARED = numbered(COMMIT);
const COMPLETE_AND_COMMIT_PREPARED = numbered(COMPLETE_AND_COMMIT, 2);

/**
 * Commits a completed call's charge to its channel; `recorded` false when it was recorded before
 * (or is not due). `keep`: the lease stays (renewed) with the process holding the channel.
 */
export async function commitChannelCharge(
  statements: StatementPool,
  invocationId: string,
  keep = false,
): Promise<CommittedCharge> {
  const seconds = keep ? HOLD_LEASE_SECONDS : LEASE_SECONDS;
  const [row] = await statements.rows('gw_channel_commit', COMMIT_PREPARED, [invocationId, keep, seconds, keep]);
  return committedOf(row);
}

function committedOf(row: Raw | undefined): CommittedCharge {
  return {
    recorded: Number(row?.recorded ?? 0) > 0,
    committed: row?.committed === true,
    held: row?.held === true,
    row: row?.id ? rowOf(row) : null,
  };
}

/**
 * Completes a held channel's call (its row, running, given as the recorder's record of its
 * completion) and commits its charge, in one statement (COMPLETE_AND_COMMIT); `recorded` false
 * when the row was not there to complete as it expects, for the caller to complete it otherwise.
 */
export async function completeAndCommitChannelCharge(
  statements: StatementPool,
  completion: string,
  keep: boolean,
): Promise<CommittedCharge> {
  const seconds = keep ? HOLD_LEASE_SECONDS : LEASE_SECONDS;
  const [row] = await statements.rows('gw_channel_complete_commit', COMPLETE_AND_COMMIT_PREPARED, [
    completion,
    keep,
    seconds,
    keep,
  ]);
  return committedOf(row);
}
