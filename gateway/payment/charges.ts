// Settling a metered (x402 `upto`) call's charge once its answer is complete. The call was
// admitted with its payment verified and bound, and its signed payment kept on the binding
// (payment_claims.signed_payment); its completion recorded the charge its meter measured
// (gateway/invocations/metered.ts). This asks the tenant's facilitator to collect exactly that
// charge, once:
// - a charge of 0 moves nothing and asks nobody;
// - a tenant without settlement configured has its payments verified only (as `exact`'s are);
// - the charge is frozen (`settling`) before the facilitator is asked, so what is recorded is
//   what was sent;
// - the facilitator's answer is recorded on the invocation and its binding in one statement,
//   only while the charge is still due, so a second settle (a retried activity, the due-charges
//   round racing a stream's own start) records nothing new and answers what was recorded; the
//   facilitator itself dedupes a repeated request by the Permit2 nonce, so nothing is collected twice;
// - not knowing the outcome (no answer, a facilitator busy with the same authorization) is
//   ChargeNotSettledYet: the caller retries the same request;
// - a charge the facilitator did not collect is recorded `failed`, with why as the chain shows it
//   (the payer moved its funds or revoked its allowance: the seller's loss, visible);
// - one tenant's charges are asked about at most CHARGE_TENANT_CONCURRENCY at once per worker
//   process; one more is ChargeNotSettledYet (`tenant_busy`) at once, retried later, so it gives
//   its activity slot back instead of holding it. A tenant with thousands of charges, or whose
//   facilitator answers only at the settlement timeout, then holds that many of the worker's
//   slots, never all of them: the other tenants' charges (and calls, on the same task queue)
//   keep theirs.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import type { VaultConfig } from '../credentials/config.ts';
import type { VaultClient } from '../credentials/vault.ts';
import { recordMeteredCharge } from '../metrics.ts';
import { loadSettlementClientTls } from '../settlement/tls.ts';
import type { PaymentConfig } from './config.ts';
import type { ChargeSettlementState, KeptPayment, SignedPayment } from './entity.ts';
import type { FacilitatorClient } from './facilitator-client.ts';
import { gatewayScheme } from './schemes/index.ts';
import { commitChannelCharge } from './channels/store.ts';
import type { StatementPool } from '../db/statement-pool.ts';
import { TenantSlots } from '../upstream/tenant-slots.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';

export type ChargeDeps = {
  orm: MikroORM;
  log: Logger;
  config: { vault: VaultConfig; payment: PaymentConfig };
  vaultClient: VaultClient;
  client: FacilitatorClient;
  /** The process's prepared statements (db/statement-pool.ts), for the channel commit. */
  statements: StatementPool;
};

/** Where a call's charge stands once settled: what its row and binding now say. */
export type ChargeOutcome = {
  /** `not_metered`: the call has no charge to settle (not metered, or gone). */
  state: ChargeSettlementState | 'not_metered';
  charge: string | null;
  /** The transaction that moved the charge; null when nothing moved (0, failed, unconfigured). */
  transaction: string | null;
  /** Why a failed charge was not collected. */
  error: string | null;
  payer: string | null;
};

/** The call is not complete yet: its charge is not known. Retried. */
export class ChargeNotDue extends Error {
  constructor() {
    super('the call is not complete yet');
    this.name = 'ChargeNotDue';
  }
}

/** The facilitator's outcome is not known (no answer in time, busy with the same authorization). Retried. */
export class ChargeNotSettledYet extends Error {
  /** What kept it from settling: `settlement_unavailable`, `settlement_credential`, `tenant_busy`. */
  readonly reason: string;
  constructor(reason: string) {
    super('the charge is not settled yet');
    this.name = 'ChargeNotSettledYet';
    this.reason = reason;
  }
}

type ChargeRow = {
  tenant_id: string;
  status: string;
  payment_scheme: string | null;
  payment_charge: string | null;
  payment_settlement: ChargeSettlementState | null;
  payment_settle_error: string | null;
  payment_transaction: string | null;
  payment_payer: string | null;
  signed_payment: KeptPayment | null;
};

const LOAD = `
  select i.tenant_id, i.status, i.payment_scheme, i.payment_charge, i.payment_settlement,
         i.payment_settle_error, i.payment_transaction, i.payment_payer, c.signed_payment
    from invocations i left join payment_claims c on c.invocation_id = i.id
   where i.id = ?`;

// Before the facilitator is asked, the charge is frozen (`settling`): the row's charge can no
// longer change (a stream's late completion after the lost-stream sweep closed it, stream-records.ts),
// so what is recorded is what was sent; a retried attempt sends the same frozen charge.
const FREEZE = `
  update invocations set payment_settlement = 'settling', updated_at = now()
   where id = ? and payment_settlement is null and payment_scheme is not null
     and status in ('succeeded', 'failed') and payment_charge is not null`;

// Only a charge still due (or frozen) is recorded; its binding follows in the same statement
// (settled with its transaction, or unsettled), and the signed payment, of no further use, is
// let go.
const RECORD = `
  with charged as (
    update invocations
       set payment_settlement = ?, payment_settle_error = ?, payment_transaction = ?, updated_at = now()
     where id = ? and (payment_settlement is null or payment_settlement = 'settling') and payment_scheme is not null
    returning id),
  bound as (
    update payment_claims
       set status = ?, transaction = ?, signed_payment = null, updated_at = now()
     where invocation_id in (select id from charged))
  select count(*)::int as charged from charged`;

const TERMINAL = new Set(['succeeded', 'failed']);

/** A recorded state: the charge is no longer due. */
const settledState = (state: ChargeRow['payment_settlement']): boolean => state !== null && state !== 'settling';

function outcomeOf(row: ChargeRow): ChargeOutcome {
  return {
    state: row.payment_settlement ?? 'not_metered',
    charge: row.payment_charge,
    transaction: row.payment_transaction,
    error: row.payment_settle_error,
    payer: row.payment_payer,
  };
}

export function createChargeSettler(deps: ChargeDeps) {
  const execute = <T extends object[]>(sql: string, params: unknown[]) =>
    deps.orm.em.getConnection().execute<T>(sql, params);
  const load = async (invocationId: string) => (await execute<ChargeRow[]>(LOAD, [invocationId]))[0];
  // Each tenant's charges in flight to its facilitator, in this process.
  const slots = new TenantSlots(deps.config.payment.chargeTenantConcurrency);

  /** Records the settlement while the charge is due; answers what the row then says. */
  async function record(
    invocationId: string,
    state: ChargeSettlementState,
    transaction: string | null,
    error: string | null,
  ): Promise<ChargeOutcome> {
    const claimStatus = state === 'settled' ? 'settled' : state === 'failed' ? 'unsettled' : 'claimed';
    const [written] = await execute<Array<{ charged: number }>>(RECORD, [
      state,
      error,
      transaction,
      invocationId,
      claimStatus,
      transaction,
    ]);
    // Counted by whoever recorded it: a second settle of the same charge counts nothing.
    if (written?.charged) recordMeteredCharge(state === 'settled' && !transaction ? 'nothing_due' : state, error);
    const row = await load(invocationId);
    return row ? outcomeOf(row) : { state, charge: null, transaction, error, payer: null };
  }

  /** Why the facilitator did not collect `charge`, as the payment's scheme reads it from the chain. */
  async function uncollected(signed: SignedPayment, charge: bigint, refused: string): Promise<string> {
    const scheme = gatewayScheme(signed.requirements.scheme);
    const cause = await scheme?.uncollectedCause?.(deps.config.payment, signed.payment, signed.requirements, charge);
    return cause ?? refused;
  }

  /** Commits a batch-settlement call's charge to its channel, once; answers what the row then says. */
  async function commitToChannel(
    invocationId: string,
    signed: KeptPayment | null,
    charge: bigint,
  ): Promise<ChargeOutcome> {
    // A call released before it reached its upstream (binding.ts) has no voucher left and owes
    // nothing: settled with nothing moved, as an `upto` charge of 0 is.
    if (!signed?.channelLease && charge === 0n) return record(invocationId, 'settled', null, null);
    if (!signed?.channelLease) return record(invocationId, 'failed', null, 'signed_payment_missing');
    const { recorded, committed } = await commitChannelCharge(deps.statements, invocationId);
    if (recorded) recordMeteredCharge(committed ? 'settled' : 'failed', committed ? null : 'voucher_exceeded');
    const row = await load(invocationId);
    return row ? outcomeOf(row) : { ...NOT_METERED };
  }

  /** Asks the tenant's facilitator to collect `charge` and records its answer. */
  async function settleWithFacilitator(
    invocationId: string,
    tenantId: string,
    signed: SignedPayment,
    charge: bigint,
  ): Promise<ChargeOutcome> {
    let target;
    try {
      target = await loadSettlementClientTls(deps, tenantId);
    } catch {
      // The tenant's facilitator credential cannot be read now: it may come back.
      throw new ChargeNotSettledYet('settlement_credential');
    }
    if (!target) return record(invocationId, 'unconfigured', null, null);
    const outcome = await deps.client.settleCharge(target, signed.payment, {
      requirements: signed.requirements,
      amount: charge,
    });
    if (outcome.ok) return record(invocationId, 'settled', outcome.transaction || null, null);
    if (outcome.error === 'settlement_unavailable') throw new ChargeNotSettledYet(outcome.error);
    const reason = await uncollected(signed, charge, outcome.error);
    deps.log.warn({ invocationId, reason }, 'metered charge not collected');
    return record(invocationId, 'failed', null, reason);
  }

  return {
    /**
     * Settles the call's charge if it is due; answers where it stands. Throws ChargeNotDue and
     * ChargeNotSettledYet (retry), and what the database throws.
     */
    async settle(invocationId: string): Promise<ChargeOutcome> {
      let row = await load(invocationId);
      if (!row || !row.payment_scheme) return { ...NOT_METERED };
      if (settledState(row.payment_settlement)) return outcomeOf(row);
      if (!TERMINAL.has(row.status) || row.payment_charge === null) throw new ChargeNotDue();
      if (row.payment_settlement === null) {
        await execute(FREEZE, [invocationId]);
        row = await load(invocationId);
        if (!row) return { ...NOT_METERED };
        if (settledState(row.payment_settlement)) return outcomeOf(row);
      }
      const charge = BigInt(row.payment_charge!);
      // A channel payment's charge joins its channel's charged total (claimed on chain later, in
      // batches), and the call lets its channel go, even at 0.
      if (row.payment_scheme === SCHEME_BATCH_SETTLEMENT)
        return commitToChannel(invocationId, row.signed_payment, charge);
      // Nothing to move: nobody is asked, nothing goes on chain.
      if (charge === 0n) return record(invocationId, 'settled', null, null);
      const signed = row.signed_payment;
      // A binding without its signed payment (recorded before they were kept) cannot be charged:
      // the seller's loss, said as such.
      if (!signed || !('requirements' in signed)) return record(invocationId, 'failed', null, 'signed_payment_missing');
      const release = slots.tryAcquire(row.tenant_id);
      if (!release) throw new ChargeNotSettledYet('tenant_busy');
      try {
        return await settleWithFacilitator(invocationId, row.tenant_id, signed, charge);
      } finally {
        release();
      }
    },

    /** Gives up on a charge whose outcome stayed unknown past every retry: recorded failed, with why. */
    async abandon(invocationId: string, reason: string): Promise<ChargeOutcome> {
      const row = await load(invocationId);
      if (!row || !row.payment_scheme) return { ...NOT_METERED };
      if (settledState(row.payment_settlement)) return outcomeOf(row);
      return record(invocationId, 'failed', null, reason);
    },
  };
}

const NOT_METERED: ChargeOutcome = { state: 'not_metered', charge: null, transaction: null, error: null, payer: null };
