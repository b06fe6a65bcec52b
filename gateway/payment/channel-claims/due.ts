// When a tenant's channels are claimed (docs/SETTLEMENT.md, "Channels: claims and settles"):
// - a round starts at most every claim_every_seconds while the tenant has unclaimed charges;
// - sooner (at most every `urgentGapMs`) when its unclaimed total reaches claim_threshold, or
//   when a payer of one of its channels with unclaimed charges has started a timed withdrawal:
//   the withdrawal can finalize withdrawDelay after it started (15 minutes at least, on chain),
//   and what the payer takes back then cannot be claimed any more;
// - the chain watch keeps each unclaimed channel's mirror of the chain (its escrow, claimed total
//   and pending withdrawal) at most `staleMs` old, so a withdrawal is noticed in time.
// A channel set aside (claims.ts CLAIMABLE: its voucher cannot be claimed) makes no round due and
// is not watched, until a newer voucher is committed on it.
// Both lease their rows (settlement_configs.claim_round_at, channels.onchain_synced_at) in one
// statement, so API processes running the rounds side by side never take the same row twice.
import type { GatewayDb } from '../../db/orm.ts';
import { channelsOnChain, type ChainRpc } from './chain.ts';
import { CLAIMABLE } from './claims.ts';

/** Why a round was started: shown on its workflow. */
type ClaimReason = 'period' | 'threshold' | 'withdrawal';

export type DueClaimRound = { tenantId: string; reason: ClaimReason };

// The unclaimed charges per tenant (what the vouchers allow), then the tenants whose round is due.
// A tenant whose claim_round_at another process moved meanwhile is not taken (the statement's
// re-check after the row lock).
const LEASE_ROUNDS = `
  with unclaimed as (
    select tenant_id,
           sum(least(charged_cumulative, signed_max_claimable) - total_claimed) as amount,
           bool_or(withdraw_requested_at > 0) as withdrawing
      from channels
     where charged_cumulative > total_claimed and signed_max_claimable > total_claimed and signature is not null
       and ${CLAIMABLE}
     group by tenant_id),
  due as (
    select s.tenant_id, s.claim_round_at,
           case when u.withdrawing then 'withdrawal'
                when s.claim_threshold is not null and u.amount >= s.claim_threshold then 'threshold'
                else 'period' end as reason
      from settlement_configs s join unclaimed u on u.tenant_id = s.tenant_id
     where s.claim_round_at is null
        or s.claim_round_at <= now() - make_interval(secs => s.claim_every_seconds)
        or ((u.withdrawing or (s.claim_threshold is not null and u.amount >= s.claim_threshold))
            and s.claim_round_at <= now() - make_interval(secs => ? / 1000.0))
     order by s.claim_round_at nulls first
     limit ?)
  update settlement_configs s set claim_round_at = now()
    from due
   where s.tenant_id = due.tenant_id and s.claim_round_at is not distinct from due.claim_round_at
  returning s.tenant_id, due.reason`;

export async function leaseDueClaimRounds(
  db: GatewayDb,
  opts: { urgentGapMs: number; batch: number },
): Promise<DueClaimRound[]> {
  const rows = await db.em
    .getConnection()
    .execute<Array<{ tenant_id: string; reason: ClaimReason }>>(LEASE_ROUNDS, [opts.urgentGapMs, opts.batch]);
  return rows.map((r) => ({ tenantId: r.tenant_id, reason: r.reason }));
}

// The lease is the mirror's own timestamp, taken before the chain is read.
const LEASE_STALE = `
  update channels set onchain_synced_at = now()
   where id in (
     select id from channels
      where charged_cumulative > total_claimed and ${CLAIMABLE}
        and (onchain_synced_at is null or onchain_synced_at < now() - make_interval(secs => ? / 1000.0))
      order by onchain_synced_at nulls first
      limit ? for update skip locked)
  returning id, onchain_synced_at::text as leased_at`;

// Written only where nobody mirrored the channel since the lease (a newer read wins); the
// claimed total and the refund nonce only rise.
const MIRROR = `
  update channels c
     set balance = v.balance::numeric,
         total_claimed = greatest(c.total_claimed, v.total_claimed::numeric),
         withdraw_requested_at = v.withdraw_requested_at,
         refund_nonce = greatest(c.refund_nonce, v.refund_nonce::numeric),
         updated_at = now()
    from jsonb_to_recordset(?::jsonb)
         as v(id text, balance text, total_claimed text, withdraw_requested_at bigint, refund_nonce text,
              leased_at timestamptz)
   where c.id = v.id and c.onchain_synced_at = v.leased_at`;

/**
 * Mirrors the chain for up to `batch` unclaimed channels whose mirror is older than `staleMs`;
 * answers how many were read and how many have a withdrawal pending.
 */
export async function watchUnclaimedChannels(
  db: GatewayDb,
  rpc: ChainRpc,
  opts: { staleMs: number; batch: number },
): Promise<{ read: number; withdrawing: number }> {
  const connection = db.em.getConnection();
  // The lease's instant as PostgreSQL wrote it (microseconds), to be matched exactly.
  const leased = await connection.execute<Array<{ id: string; leased_at: string }>>(LEASE_STALE, [
    opts.staleMs,
    opts.batch,
  ]);
  if (leased.length === 0) return { read: 0, withdrawing: 0 };
  const leasedAt = new Map(leased.map((r) => [r.id, r.leased_at]));
  const chain = await channelsOnChain(rpc, [...leasedAt.keys()]);
  const rows = [...chain].map(([id, s]) => ({
    id,
    balance: String(s.balance),
    total_claimed: String(s.totalClaimed),
    withdraw_requested_at: s.withdrawRequestedAt,
    refund_nonce: String(s.refundNonce),
    leased_at: leasedAt.get(id),
  }));
  await connection.execute(MIRROR, [JSON.stringify(rows)]);
  return { read: rows.length, withdrawing: rows.filter((r) => r.withdraw_requested_at > 0).length };
}
