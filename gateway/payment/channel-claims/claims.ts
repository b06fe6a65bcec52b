// Claiming what the gateway charged on batch-settlement channels, and sweeping it to the
// receivers (docs/SETTLEMENT.md, "Channels: claims and settles"). A tenant's round:
// - plan: the tenant's channels whose charges are not all claimed, each to be claimed up to what
//   it was charged, never past the payer's latest signed voucher (channels with a payer's timed
//   withdrawal pending first, then the most unclaimed), in batches of at most MAX_CLAIM_ROWS;
// - claim: one batch in one `claim` /settle to the tenant's facilitator (its receiver authorizer
//   signs one claimWithSignature for all the rows). Each row is first bounded by the chain (the
//   channel's escrow) and checked as the facilitator will check it (the payer's voucher
//   signature, the facilitator's receiver authorizer, the token): a row that would refuse the
//   whole batch is left out with its cause on the channel. A row the chain already holds is not
//   sent, only recorded. A batch the facilitator still fails is claimed in parts (split.ts): the
//   row it will not claim ends alone and is set aside, the others are claimed. Claims are
//   cumulative: a retried claim sends rows with the same totals (the facilitator answers the same
//   settlement) or finds them on chain, so nothing is claimed twice; the claimed total recorded
//   only ever rises;
// - settle: what the claims credited a receiver in the deployment's token, sent to it.
// Not knowing the facilitator's answer is ClaimNotSettledYet (retried with the same rows).
import { loadSettlementClientTls, type SettlementClientTls } from '../../settlement/tls.ts';
import type { ChargeDeps } from '../charges.ts';
import { receiverAuthorizerOf } from '../schemes/batch-settlement/index.ts';
import { caip2Network } from '../../../x402/v2.ts';
import { contractSignatureCheckFor } from '../../../x402/erc1271.ts';
import { SCHEME_BATCH_SETTLEMENT, type ChannelConfig } from '../../../x402/schemes/batch-settlement/schemas.ts';
import { MAX_CLAIM_ROWS, type ClaimRow } from '../../../x402/schemes/batch-settlement/settle-request.ts';
import { verifyClaimRow } from '../../../x402/schemes/batch-settlement/verify.ts';
import { channelsOnChain, receiverOnChain, type ChannelOnChain } from './chain.ts';
import { recordChannelClaimRequest, recordChannelQuarantined } from '../../metrics.ts';
import { claimInParts, type PartAnswer } from './split.ts';

/** What the claims need: the metered charges' settler's (the database, the tenant's facilitator and its client). */
export type ChannelClaimDeps = ChargeDeps;

/** One channel of a planned claim: claimed up to `totalClaimed` (what was charged, within the voucher). */
export type PlannedClaim = { channel: string; receiver: string; totalClaimed: string; unclaimed: string };

/** A round's plan: the batches to claim, and whether more channels wait past them. */
export type ClaimPlan = { batches: PlannedClaim[][]; more: boolean };

/** What one batch's claim did. */
export type ClaimOutcome = {
  /**
   * claimed: channels are now claimed (sent, or found on chain); nothing: no channel could be
   * claimed; refused: the facilitator refused every part of the batch it was sent;
   * unconfigured: the tenant has no settlement configuration.
   */
  state: 'claimed' | 'nothing' | 'refused' | 'unconfigured';
  /**
   * The transaction this claim sent; null when it sent none (the chain held the rows already).
   * With several (a batch the facilitator refused, claimed in parts), the first: `transactions`
   * lists them all.
   */
  transaction: string | null;
  /** Every claim transaction this claim sent, in the order sent. */
  transactions: string[];
  /** Claim requests sent to the facilitator: more than one when a refused batch was claimed in parts. */
  requests: number;
  /** The channels now claimed up to these totals (sent, or found on chain). */
  claimed: Array<{ channel: string; totalClaimed: string }>;
  /** The channels left out, and why (those set aside among them). */
  skipped: Array<{ channel: string; cause: string }>;
  /** The channels this claim set aside (claim_quarantined_at): planned no more until a newer voucher. */
  quarantined: string[];
  /** The (receiver, token) pairs the claimed channels credit. */
  receivers: Array<{ receiver: string; token: string }>;
};

export type SweepOutcome = {
  receiver: string;
  token: string;
  amount: string;
  transaction: string | null;
  state: string;
};

/** The facilitator's answer is not known (no answer in time, its kinds unreadable). Retried. */
export class ClaimNotSettledYet extends Error {
  readonly reason: string;
  constructor(reason: string) {
    super('the claim is not settled yet');
    this.name = 'ClaimNotSettledYet';
    this.reason = reason;
  }
}

/** Batches a round claims at most before it continues as new (1000 channels). */
const MAX_BATCHES = 10;

type ChannelRow = {
  id: string;
  config: ChannelConfig;
  charged_cumulative: string;
  signed_max_claimable: string;
  signature: string | null;
  total_claimed: string;
  claimable: boolean;
  claim_error: string | null;
};

/**
 * Not set aside (quarantined: its voucher cannot be claimed), or given a newer voucher since:
 * a call committed after the quarantine (last_request_at) made its voucher another.
 */
export const CLAIMABLE = `(claim_quarantined_at is null or last_request_at > claim_quarantined_at)`;

/**
 * Why a row is left out that no retry changes (the voucher itself: not the payer's signature, a
 * config naming another token, a ceiling no claim can take): its channel is set aside. A receiver
 * authorizer that does not match may be the facilitator's to fix: not one.
 */
const UNCLAIMABLE = new Set([
  'invalid_batch_settlement_evm_voucher_signature',
  'invalid_batch_settlement_evm_channel_id_mismatch',
  'invalid_batch_settlement_evm_token_mismatch',
  'invalid_batch_settlement_evm_claim_payload',
]);

const PLAN = `
  select id, receiver,
         least(charged_cumulative, signed_max_claimable)::text as target,
         (least(charged_cumulative, signed_max_claimable) - total_claimed)::text as unclaimed
    from channels
   where tenant_id = ? and charged_cumulative > total_claimed and signed_max_claimable > total_claimed
     and signature is not null and ${CLAIMABLE}
   order by (withdraw_requested_at > 0) desc, withdraw_requested_at,
            least(charged_cumulative, signed_max_claimable) - total_claimed desc, id
   limit ?`;

// A channel set aside since the plan (by an earlier attempt of this claim) is not sent again.
const LOAD = `
  select id, config, charged_cumulative::text, signed_max_claimable::text, signature, total_claimed::text,
         ${CLAIMABLE} as claimable, claim_error
    from channels where tenant_id = ? and id in (select jsonb_array_elements_text(?::jsonb))`;

// The chain's word on each channel, and what this round did to it: the claimed total only rises;
// the escrow and the pending withdrawal are taken unless the row was mirrored after this read.
const NEWER = '(c.onchain_synced_at is null or c.onchain_synced_at <= v.read_at)';
const RECORD = `
  update channels c
     set total_claimed = greatest(c.total_claimed, coalesce(v.claimed::numeric, 0), v.chain_claimed::numeric),
         balance = case when ${NEWER} then v.balance::numeric else c.balance end,
         withdraw_requested_at = case when ${NEWER} then v.withdraw_requested_at else c.withdraw_requested_at end,
         onchain_synced_at = case when ${NEWER} then v.read_at else c.onchain_synced_at end,
         claimed_at = case when v.claimed is null then c.claimed_at else now() end,
         claim_error = case when v.claimed is null and v.error is null then c.claim_error else v.error end,
         claim_quarantined_at = case when v.quarantine then now() when v.claimed is not null then null
                                     else c.claim_quarantined_at end,
         updated_at = now()
    from jsonb_to_recordset(?::jsonb)
         as v(id text, claimed text, chain_claimed text, balance text, withdraw_requested_at bigint, error text,
              quarantine boolean, read_at timestamptz)
   where c.id = v.id and c.tenant_id = ?`;

type Recorded = {
  id: string;
  claimed: string | null;
  chain_claimed: string;
  balance: string;
  withdraw_requested_at: number;
  error: string | null;
  /** Set aside: its voucher cannot be claimed (UNCLAIMABLE, or refused alone by the facilitator). */
  quarantine: boolean;
  /** When the chain was read (before the reads). */
  read_at: string;
};

/** A row to send: its claim, and the chain's word on its channel when the claim began. */
type Candidate = { id: string; row: ClaimRow; onChain: ChannelOnChain; short: boolean };

const min = (...values: bigint[]) => values.reduce((a, b) => (b < a ? b : a));

export function createChannelClaims(deps: ChannelClaimDeps) {
  const execute = <T extends object[]>(sql: string, params: unknown[]) =>
    deps.orm.em.getConnection().execute<T>(sql, params);
  const { payment } = deps.config;
  const chainId = payment.domain.chainId;
  const token = payment.domain.verifyingContract;
  const network = caip2Network(chainId);
  const rpc = payment.contractSignatures;
  const contracts = contractSignatureCheckFor(rpc.rpcUrl, rpc.timeoutMs);

  async function target(tenantId: string): Promise<SettlementClientTls | null> {
    try {
      return await loadSettlementClientTls(deps, tenantId);
    } catch {
      // The tenant's facilitator credential cannot be read now: it may come back.
      throw new ClaimNotSettledYet('settlement_credential');
    }
  }

  /** The x402 v2 settle body of a batch-settlement action, the requirements naming the receiver. */
  function body(action: unknown, payTo: string) {
    return {
      x402Version: 2 as const,
      paymentPayload: {
        x402Version: 2,
        accepted: { scheme: SCHEME_BATCH_SETTLEMENT, network, asset: token, amount: '0', payTo },
        payload: action,
      },
      paymentRequirements: {
        scheme: SCHEME_BATCH_SETTLEMENT,
        network,
        asset: token,
        amount: '0',
        payTo,
        maxTimeoutSeconds: payment.maxTimeoutSeconds,
      },
    };
  }

  /** The receiver authorizer the facilitator signs claims as (its /supported batch-settlement kind). */
  async function authorizerOf(facilitator: SettlementClientTls): Promise<string> {
    const kinds = await deps.client.supported(facilitator);
    if (!kinds) throw new ClaimNotSettledYet('facilitator_unreadable');
    // None: every row is left out (receiver_authorizer_mismatch), nothing is sent.
    return receiverAuthorizerOf(payment, kinds) ?? '';
  }

  async function record(tenantId: string, rows: Recorded[]): Promise<void> {
    if (rows.length) await execute(RECORD, [JSON.stringify(rows), tenantId]);
  }

  /** One claim request of a batch's rows, its answer as the split reads it (the first: the whole batch). */
  function sendPart(facilitator: SettlementClientTls) {
    let request: 'batch' | 'part' = 'batch';
    return async (part: Candidate[]): Promise<PartAnswer> => {
      const action = { type: 'claim', claims: part.map((c) => c.row) };
      const answer = await deps.client.settleChannel(facilitator, body(action, part[0]!.row.voucher.channel.receiver));
      recordChannelClaimRequest(request, answer.ok ? 'claimed' : answer.error);
      request = 'part';
      return answer.ok ? { ok: true, transaction: answer.transaction } : { ok: false, error: answer.error };
    };
  }

  return {
    /** The round's batches: the tenant's unclaimed channels, most urgent first. */
    async plan(tenantId: string): Promise<ClaimPlan> {
      const limit = MAX_BATCHES * MAX_CLAIM_ROWS;
      const rows = await execute<Array<{ id: string; receiver: string; target: string; unclaimed: string }>>(PLAN, [
        tenantId,
        limit + 1,
      ]);
      const planned = rows.slice(0, limit).map((r) => ({
        channel: r.id,
        receiver: r.receiver,
        totalClaimed: r.target,
        unclaimed: r.unclaimed,
      }));
      const batches: PlannedClaim[][] = [];
      for (let i = 0; i < planned.length; i += MAX_CLAIM_ROWS) batches.push(planned.slice(i, i + MAX_CLAIM_ROWS));
      return { batches, more: rows.length > limit };
    },

    /**
     * Claims one planned batch in one claim request, or in parts when the facilitator fails it
     * (split.ts). `deadline` (ms since the epoch): no part is sent that could not be answered
     * before it; the rows not sent are the next round's. Throws ClaimNotSettledYet (retry).
     */
    async claim(
      tenantId: string,
      planned: readonly PlannedClaim[],
      opts: { deadline?: number } = {},
    ): Promise<ClaimOutcome> {
      const outcome: ClaimOutcome = {
        state: 'nothing',
        transaction: null,
        transactions: [],
        requests: 0,
        claimed: [],
        skipped: [],
        quarantined: [],
        receivers: [],
      };
      const facilitator = await target(tenantId);
      if (!facilitator) return { ...outcome, state: 'unconfigured' };
      const ids = planned.map((p) => p.channel);
      const loaded = new Map(
        (await execute<ChannelRow[]>(LOAD, [tenantId, JSON.stringify(ids)])).map((r) => [r.id, r] as const),
      );
      const readAt = new Date().toISOString();
      const [authorizer, chain] = await Promise.all([
        authorizerOf(facilitator),
        channelsOnChain(rpc, [...loaded.keys()]),
      ]);
      const mirrored = (
        id: string,
        onChain: ChannelOnChain,
        claimed: bigint | null,
        error: string | null,
        quarantine = false,
      ): Recorded => {
        if (quarantine) {
          recordChannelQuarantined(error ?? 'unknown');
          deps.log.warn({ tenantId, channelId: id, cause: error }, 'channel set aside: its voucher cannot be claimed');
          outcome.quarantined.push(id);
        }
        return {
          id,
          claimed: claimed === null ? null : String(claimed),
          chain_claimed: String(onChain.totalClaimed),
          balance: String(onChain.balance),
          withdraw_requested_at: onChain.withdrawRequestedAt,
          error,
          quarantine,
          read_at: readAt,
        };
      };
      const recorded: Recorded[] = [];
      const candidates: Candidate[] = [];
      for (const p of planned) {
        const r = loaded.get(p.channel);
        const onChain = chain.get(p.channel);
        if (!r || !onChain || !r.signature) {
          outcome.skipped.push({ channel: p.channel, cause: 'channel_gone' });
          continue;
        }
        if (!r.claimable) {
          // Set aside by an earlier attempt of this claim: not sent again, not counted again.
          outcome.skipped.push({ channel: r.id, cause: r.claim_error ?? 'claim_refused' });
          continue;
        }
        // Never past the payer's voucher, nor past the escrow (the facilitator refuses a whole
        // batch with one such row); what was charged beyond the escrow cannot be claimed.
        const wanted = min(BigInt(p.totalClaimed), BigInt(r.signed_max_claimable), BigInt(r.charged_cumulative));
        const total = min(wanted, onChain.balance);
        const short = total < wanted;
        if (total <= onChain.totalClaimed) {
          // The chain holds it already (an earlier attempt's transaction, a refund's claim).
          recorded.push(mirrored(r.id, onChain, onChain.totalClaimed, short ? 'escrow_short' : null));
          outcome.claimed.push({ channel: r.id, totalClaimed: String(onChain.totalClaimed) });
          continue;
        }
        candidates.push({
          id: r.id,
          onChain,
          short,
          row: {
            voucher: { channel: r.config, maxClaimableAmount: r.signed_max_claimable },
            signature: r.signature,
            totalClaimed: String(total),
          },
        });
      }
      // Checked as the facilitator checks each row: one it would refuse is left out, with its cause.
      const checks = await Promise.all(
        candidates.map((c) =>
          verifyClaimRow(c.row, { chainId, asset: token, receiverAuthorizer: authorizer }, contracts),
        ),
      );
      const sent = candidates.filter((c, i) => {
        const check = checks[i]!;
        if (check.ok) return true;
        recorded.push(mirrored(c.id, c.onChain, null, check.cause, UNCLAIMABLE.has(check.cause)));
        outcome.skipped.push({ channel: c.id, cause: check.cause });
        return false;
      });
      if (sent.length) {
        const parts = await claimInParts(sent, sendPart(facilitator), {
          mayContinue: () => opts.deadline === undefined || Date.now() + payment.settlementTimeoutMs < opts.deadline,
        });
        outcome.requests = parts.requests;
        for (const part of parts.claimed) {
          if (part.transaction) outcome.transactions.push(part.transaction);
          for (const c of part.rows) {
            recorded.push(mirrored(c.id, c.onChain, BigInt(c.row.totalClaimed), c.short ? 'escrow_short' : null));
            outcome.claimed.push({ channel: c.id, totalClaimed: c.row.totalClaimed });
          }
        }
        // A row the facilitator refused alone cannot be claimed as it is: set aside. A row refused
        // with others and not isolated (the split stopped) is left for the next round.
        for (const c of parts.setAside) {
          recorded.push(mirrored(c.id, c.onChain, null, 'claim_refused', true));
          outcome.skipped.push({ channel: c.id, cause: 'claim_refused' });
        }
        // Refused (an answer not known is only retried): how the batch was claimed, and what is left.
        if (parts.requests > 1 || parts.stopped === 'settlement_refused')
          deps.log.warn(
            {
              tenantId,
              channels: sent.length,
              requests: parts.requests,
              claimed: parts.claimed.reduce((n, p) => n + p.rows.length, 0),
              transactions: outcome.transactions.length,
              setAside: parts.setAside.length,
              left: parts.left.length,
              stopped: parts.stopped,
            },
            parts.requests > 1 ? 'channel claim refused: claimed in parts' : 'channel claim refused',
          );
        if (parts.stopped === 'settlement_unavailable') {
          // What was claimed and set aside is kept; the rest is asked again with the same rows.
          await record(tenantId, recorded);
          throw new ClaimNotSettledYet(parts.stopped);
        }
        for (const c of parts.left) {
          recorded.push(mirrored(c.id, c.onChain, null, 'claim_refused'));
          outcome.skipped.push({ channel: c.id, cause: 'claim_refused' });
        }
        outcome.state = parts.claimed.length ? 'claimed' : 'refused';
      }
      await record(tenantId, recorded);
      // Rows the chain held already (an earlier attempt's transaction) are claimed all the same.
      if (outcome.state === 'nothing' && outcome.claimed.length) outcome.state = 'claimed';
      outcome.transaction = outcome.transactions[0] ?? null;
      const claimedIds = new Set(outcome.claimed.map((c) => c.channel));
      const receivers = new Set(
        [...loaded.values()].filter((r) => claimedIds.has(r.id)).map((r) => r.config.receiver.toLowerCase()),
      );
      outcome.receivers = [...receivers].sort().map((receiver) => ({ receiver, token }));
      return outcome;
    },

    /** Sends what claims credited (receiver, token) to the receiver. Throws ClaimNotSettledYet (retry). */
    async sweep(tenantId: string, receiver: string, sweptToken: string): Promise<SweepOutcome> {
      const totals = await receiverOnChain(rpc, receiver, sweptToken);
      const due = totals.totalClaimed - totals.totalSettled;
      const none = { receiver, token: sweptToken, amount: '0', transaction: null };
      if (due <= 0n) return { ...none, state: 'nothing' };
      const facilitator = await target(tenantId);
      if (!facilitator) return { ...none, state: 'unconfigured' };
      const answer = await deps.client.settleChannel(
        facilitator,
        body({ type: 'settle', receiver, token: sweptToken }, receiver),
      );
      if (!answer.ok && answer.error === 'settlement_unavailable') throw new ClaimNotSettledYet(answer.error);
      if (!answer.ok) return { ...none, state: 'refused' };
      return {
        receiver,
        token: sweptToken,
        amount: String(due),
        transaction: answer.transaction || null,
        state: 'settled',
      };
    },
  };
}
