// Guardrails and the nonce reservation: the account's allowed kinds and per-transaction maximum,
// then the day's usage (amount and failed-gas budget) and the settlement row that reserves the
// payer's authorization nonce, in one statement, so both commit or neither does.
import type pg from 'pg';
import type { Account, AccountKind } from '../accounts.ts';
import type { SettlementRequest } from '../settlement/request.ts';
import {
  OUTCOME_CHANNEL,
  findSettlement,
  fromRow,
  NEW_SETTLEMENT_COLUMNS,
  newSettlementValues,
  type AnnouncedOutcome,
  type SettlementRecord,
  type SettlementRow,
} from './records.ts';

export type ReservationInput = {
  key: string;
  account: Account;
  kind: AccountKind;
  payer: string;
  payTo: string;
  amount: bigint;
  validBefore: bigint;
  defaults: { maxPerTx: bigint; dailyCeiling: bigint; failedGasDailyWei: bigint };
  /** What the transfer could burn if it reverts (gas limit × max fee): held against the failed-gas budget until the outcome. */
  gasAtRiskWei: bigint;
  /**
   * Whether it draws on the account's own failed-gas budget (a batch-settlement claim or settle),
   * not its payers' (request.ts drawsOwnGasBudget): each is held to FACILITATOR_FAILED_GAS_DAILY_WEI.
   */
  ownGas?: boolean;
  /**
   * The transaction signed ahead with the gas nonce this settlement is predicted to get. The
   * reservation statement then also takes that nonce and stores the bytes (one round trip for
   * the reservation, the gas nonce and the bytes), but only if the wallet's next nonce is still the prediction; otherwise
   * the record is reserved without bytes and signing takes the nonce under the row lock
   * (signAndPersist), as it always did.
   */
  presigned?: PresignedTransaction;
  /**
   * The outbox (a /settle handler reserving before its workflow exists): the request, stored by
   * the same statement (first writer wins), so the reservation and its stored request commit
   * together. A refusal stores it too, carrying the refusal.
   */
  request?: SettlementRequest;
};

export type PresignedTransaction = {
  gasWallet: string;
  chainId: number;
  /** The node's pending count when the prediction was made (it wins when higher, as in signing). */
  chainNonce: number;
  nonce: number;
  raw: string;
  hash: string;
  gasLimit: bigint;
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
};

export type GuardrailRejection =
  'kind_not_allowed' | 'over_per_transaction_maximum' | 'over_daily_ceiling' | 'over_failed_gas_budget';

/** `raced`: another run reserved the settlement meanwhile; the record is theirs. */
export type Reservation = { reserved: SettlementRecord; raced?: true } | { rejected: GuardrailRejection };

/**
 * Guardrails, then the nonce reservation: the account's allowed kinds and per-transaction maximum
 * (checked here), then the reservation against its daily ceiling and the settlement row in ONE
 * statement, so both commit or neither does. The reservation is a conditional upsert: concurrent
 * settles of one account serialize on the usage row and each re-checks the ceiling, so they
 * cannot overshoot it. Rejected: nothing is written. Already reserved: the existing record.
 */
export async function reserveNonce(db: pg.Pool, input: ReservationInput): Promise<Reservation> {
  const result = await tryReserve(db, input);
  // A refusal reserves nothing and writes no settlement row; it is made durable on the request
  // (a run started later, e.g. by the sweeper, answers it instead of reserving afresh) and
  // announced in the same statement, so the caller waiting on the key answers 429 at once. Not
  // while another submission's reservation of the authorization stands: that settlement goes on.
  if ('rejected' in result) {
    const refusal: AnnouncedOutcome = {
      key: input.key,
      status: 'rejected',
      payer: input.payer.toLowerCase(),
      tx: null,
      cause: result.rejected,
    };
    await db.query(
      `with held as (select 1 from settlements where settlement_key = $4),
       marked as (
         insert into settle_requests as r (settlement_key, account_id, request, refused_cause)
         select $4, $5, $6::jsonb, $3 where $6::jsonb is not null and not exists (select 1 from held)
         on conflict (settlement_key) do update set refused_cause = coalesce(r.refused_cause, excluded.refused_cause)
         returning 1
       ),
       updated as (
         update settle_requests set refused_cause = coalesce(refused_cause, $3)
          where settlement_key = $4 and $6::jsonb is null and not exists (select 1 from held) returning 1
       )
       select case when not exists (select 1 from held) then pg_notify($1, $2) end,
              (select count(*) from marked), (select count(*) from updated)`,
      [
        OUTCOME_CHANNEL,
        JSON.stringify(refusal),
        result.rejected,
        input.key,
        input.account.id,
        input.request ? JSON.stringify(input.request) : null,
      ],
    );
  }
  return result;
}

/**
 * The guardrails that depend on the account and the amount alone (no usage): its allowed kinds,
 * its per-transaction maximum, a ceiling the amount alone passes. The /settle handler asks
 * them before anything is stored, so a submission they refuse reserves nothing and cannot take
 * the authorization from the account it belongs to; the reservation asks them again.
 */
export function staticGuardrail(
  input: Pick<ReservationInput, 'account' | 'kind' | 'amount' | 'defaults'>,
): GuardrailRejection | null {
  const allowed = input.account.allowedKinds.some(
    (k) => k.network === input.kind.network && k.asset.toLowerCase() === input.kind.asset.toLowerCase(),
  );
  if (!allowed) return 'kind_not_allowed';
  if (input.amount > (input.account.maxPerTx ?? input.defaults.maxPerTx)) return 'over_per_transaction_maximum';
  if (input.amount > (input.account.dailyCeiling ?? input.defaults.dailyCeiling)) return 'over_daily_ceiling';
  return null;
}

async function tryReserve(db: pg.Pool, input: ReservationInput): Promise<Reservation> {
  const refused = staticGuardrail(input);
  if (refused) return { rejected: refused };
  const ceiling = input.account.dailyCeiling ?? input.defaults.dailyCeiling;

  const pre = input.presigned;
  try {
    // reserved: the conditional reservation (empty: over the ceiling, nothing is written).
    // taken (presigned only): the predicted gas nonce, taken under the wallet's row lock only
    // if it is still the wallet's next one. attempt: the stored bytes' first attempt row.
    // The settlement row carries the bytes exactly when the nonce was taken.
    const { rows } = await db.query<SettlementRow>(
      `with reserved as (
         insert into daily_usage as u (account_id, day, reserved, gas_at_risk_wei, own_gas_at_risk_wei)
         select $7, (now() at time zone 'utc')::date, $9, case when $23::boolean then 0 else $22::numeric end,
                case when $23::boolean then $22::numeric else 0 end
          where $22::numeric <= $21::numeric
         on conflict (account_id, day) do update set reserved = u.reserved + excluded.reserved,
             gas_at_risk_wei = u.gas_at_risk_wei + excluded.gas_at_risk_wei,
             own_gas_at_risk_wei = u.own_gas_at_risk_wei + excluded.own_gas_at_risk_wei
           where u.reserved + excluded.reserved <= $11
             and case when $23::boolean then u.own_failed_gas_wei + u.own_gas_at_risk_wei
                      else u.failed_gas_wei + u.gas_at_risk_wei end + $22::numeric <= $21::numeric
         returning day
       ),
       taken as (
         insert into gas_wallets as w (address, chain_id, next_nonce)
         select $12::text, $13::integer, $15::bigint + 1 from reserved where $12::text is not null
         on conflict (address, chain_id) do update set next_nonce = excluded.next_nonce, updated_at = now()
           where greatest(w.next_nonce, $14::bigint) = $15::bigint
         returning next_nonce - 1 as nonce
       ),
       settlement as (
         insert into settlements (${NEW_SETTLEMENT_COLUMNS},
                                  status, usage_day, reserved_amount, gas_at_risk_wei, own_gas, gas_wallet, gas_nonce, raw_tx, tx_hash)
         select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, case when taken.nonce is null then 'claimed' else 'signed' end,
                reserved.day, $9, $22::numeric, $23::boolean, case when taken.nonce is null then null else $12::text end, taken.nonce,
                case when taken.nonce is null then null else $16::text end, case when taken.nonce is null then null else $17::text end
         from reserved left join taken on true
         returning *
       ),
       attempt as (
         insert into settlement_transactions (settlement_key, seq, tx_hash, raw_tx, max_fee_per_gas, max_priority_fee_per_gas)
         select settlement_key, 0, tx_hash, raw_tx, $18::numeric, $19::numeric from settlement where tx_hash is not null
       ),
       stored as (
         insert into settle_requests (settlement_key, account_id, request)
         select $2, $7, $20::jsonb where $20::jsonb is not null
         on conflict (settlement_key) do nothing
       )
       select * from settlement`,
      [
        ...newSettlementValues({ ...input, accountId: input.account.id }),
        ceiling.toString(),
        pre?.gasWallet.toLowerCase() ?? null,
        pre?.chainId ?? null,
        pre?.chainNonce ?? null,
        pre?.nonce ?? null,
        pre?.raw ?? null,
        pre?.hash ?? null,
        pre?.maxFeePerGas.toString() ?? null,
        pre?.maxPriorityFeePerGas.toString() ?? null,
        input.request ? JSON.stringify(input.request) : null,
        input.defaults.failedGasDailyWei.toString(),
        input.gasAtRiskWei.toString(),
        input.ownGas === true,
      ],
    );
    if (rows.length === 0) {
      const overGas = await overFailedGasBudget(
        db,
        input.account.id,
        input.gasAtRiskWei,
        input.defaults.failedGasDailyWei,
        input.ownGas === true,
      );
      return { rejected: overGas ? 'over_failed_gas_budget' : 'over_daily_ceiling' };
    }
    return { reserved: fromRow(rows[0]) };
  } catch (err) {
    // Reserved meanwhile (a resumed run racing a zombie worker): the statement rolled back as a
    // whole, the day's usage included; the existing reservation stands.
    if ((err as { code?: string }).code !== '23505') throw err;
    const existing = await findSettlement(db, input.key);
    if (!existing) throw err;
    return { reserved: existing, raced: true };
  }
}

/**
 * Whether this settlement's gas at risk does not fit the account's failed-gas budget it draws on
 * today, its own or its payers' (asked only once a reservation was refused).
 */
async function overFailedGasBudget(
  db: pg.Pool,
  accountId: string,
  atRiskWei: bigint,
  budgetWei: bigint,
  own: boolean,
): Promise<boolean> {
  const { rows } = await db.query<{ spent: string }>(
    `select case when $2::boolean then own_failed_gas_wei + own_gas_at_risk_wei else failed_gas_wei + gas_at_risk_wei end as spent
       from daily_usage where account_id = $1 and day = (now() at time zone 'utc')::date`,
    [accountId, own],
  );
  return BigInt(rows[0]?.spent ?? 0) + atRiskWei > budgetWei;
}

/** An account's usage of a UTC day. */
export type DailyUsage = {
  /** Amount reserved against its daily ceiling. */
  reserved: bigint;
  /** Gas burned by reverts of settlements its payers signed (exact, upto, deposits, refunds). */
  failedGasWei: bigint;
  /** Gas burned by reverts of its own settlements (batch-settlement claims and settles). */
  ownFailedGasWei: bigint;
};

/** Each account's usage of the UTC day. */
export async function usageToday(db: pg.Pool): Promise<Map<string, DailyUsage>> {
  const { rows } = await db.query<{
    account_id: string;
    reserved: string;
    failed_gas_wei: string;
    own_failed_gas_wei: string;
  }>(
    `select account_id, reserved, failed_gas_wei, own_failed_gas_wei from daily_usage
      where day = (now() at time zone 'utc')::date`,
  );
  return new Map(
    rows.map((r) => [
      r.account_id,
      {
        reserved: BigInt(r.reserved),
        failedGasWei: BigInt(r.failed_gas_wei),
        ownFailedGasWei: BigInt(r.own_failed_gas_wei),
      },
    ]),
  );
}
