// The facilitator's settlement records. Every state change is one conditional SQL statement
// or one short transaction, so a retried activity (or a second worker after a crash) finds
// the work already done instead of doing it twice:
// - UNIQUE (chain, token, payer, nonce): one settlement per authorization;
// - the daily reservation and the claim commit together, or neither does;
// - the gas nonce is taken under the gas wallet's row lock and the signed bytes are stored
//   with it before anything is sent; UNIQUE (gas_wallet, gas_nonce): one transaction per nonce.
import type pg from 'pg';
import { Transaction, getAddress } from 'ethers';
import { v7 as uuidv7 } from 'uuid';
import { inTransaction } from './db/pool.ts';
import type { Account, AccountKind } from './accounts.ts';
import type { SettleRequest } from '../x402/schemas.ts';

export type SettlementStatus = 'claimed' | 'signed' | 'broadcast' | 'pending' | 'settled' | 'failed';

export type SettlementRecord = {
  id: string;
  key: string;
  accountId: string;
  payer: string;
  payTo: string;
  amount: bigint;
  validBefore: bigint;
  status: SettlementStatus;
  failureCause: string | null;
  gasNonce: number | null;
  txHash: string | null;
  rawTx: string | null;
  blockNumber: number | null;
  attempts: number;
};

type SettlementRow = {
  id: string;
  settlement_key: string;
  account_id: string;
  payer: string;
  pay_to: string;
  amount: string;
  valid_before: string;
  status: SettlementStatus;
  failure_cause: string | null;
  gas_nonce: string | null;
  tx_hash: string | null;
  raw_tx: string | null;
  block_number: string | null;
  attempts: number;
};

function fromRow(row: SettlementRow): SettlementRecord {
  return {
    id: row.id,
    key: row.settlement_key,
    accountId: row.account_id,
    payer: row.payer,
    payTo: row.pay_to,
    amount: BigInt(row.amount),
    validBefore: BigInt(row.valid_before),
    status: row.status,
    failureCause: row.failure_cause,
    gasNonce: row.gas_nonce === null ? null : Number(row.gas_nonce),
    txHash: row.tx_hash,
    rawTx: row.raw_tx,
    blockNumber: row.block_number === null ? null : Number(row.block_number),
    attempts: row.attempts,
  };
}

/** Workflow id and record key of one authorization: `settle:{chainId}:{token}:{payer}:{nonce}`, lowercase hex. */
export function settlementKey(chainId: number, token: string, payer: string, nonce: string): string {
  return `settle:${chainId}:${token.toLowerCase()}:${payer.toLowerCase()}:${nonce.toLowerCase()}`;
}

export function parseSettlementKey(key: string): { chainId: number; token: string; payer: string; nonce: string } {
  const [, chainId, token, payer, nonce] = key.split(':');
  return { chainId: Number(chainId), token, payer, nonce };
}

/** PostgreSQL channel on which a settlement's outcome is announced when its record gets one. */
export const OUTCOME_CHANNEL = 'settlement_outcome';

/** The NOTIFY payload: what a waiting /settle handler answers from (JSON). */
export type AnnouncedOutcome = {
  key: string;
  status: SettlementStatus | 'rejected';
  payer: string;
  tx: string | null;
  cause: string | null;
};

// Builds the payload in SQL from the row `r`, so the announcement is exactly what was committed.
const ANNOUNCEMENT = (r: string) =>
  `json_build_object('key', ${r}.settlement_key, 'status', ${r}.status, 'payer', ${r}.payer, 'tx', ${r}.tx_hash, 'cause', ${r}.failure_cause)::text`;

async function notifyOutcome(db: pg.Pool | pg.PoolClient, key: string): Promise<void> {
  await db.query(`select pg_notify($1, ${ANNOUNCEMENT('s')}) from settlements s where s.settlement_key = $2`, [
    OUTCOME_CHANNEL,
    key,
  ]);
}

// ---- claim check of the signed request ----

/**
 * Stores the request by key; true when this call stored it (the first request of its
 * authorization), false when one was already there. First writer wins: any later request for
 * the key carries a signature over the same authorization (the handler checked it), so keeping
 * the first loses nothing.
 */
export async function saveSettleRequest(
  db: pg.Pool,
  key: string,
  accountId: string,
  request: SettleRequest,
): Promise<boolean> {
  const { rowCount } = await db.query(
    'insert into settle_requests (settlement_key, account_id, request) values ($1, $2, $3) on conflict (settlement_key) do nothing',
    [key, accountId, JSON.stringify(request)],
  );
  return rowCount === 1;
}

export type StoredSettleRequest = {
  accountId: string;
  request: SettleRequest;
  /** A durable refusal (guardrail, or a run that gave up before signing): answered, never claimed afresh. */
  refusedCause: string | null;
};

export async function loadSettleRequest(db: pg.Pool, key: string): Promise<StoredSettleRequest | null> {
  const { rows } = await db.query<{ account_id: string; request: SettleRequest; refused_cause: string | null }>(
    'select account_id, request, refused_cause from settle_requests where settlement_key = $1',
    [key],
  );
  return rows[0]
    ? { accountId: rows[0].account_id, request: rows[0].request, refusedCause: rows[0].refused_cause }
    : null;
}

/** The settlement's workflow exists (its start was acknowledged, or found it already there). */
export async function markWorkflowStarted(db: pg.Pool, key: string): Promise<void> {
  await db.query(
    'update settle_requests set workflow_started_at = now() where settlement_key = $1 and workflow_started_at is null',
    [key],
  );
}

/**
 * Requests older than `olderThanMs` whose workflow start was never acknowledged and that opened
 * something a workflow must follow (a settlement row, or a durable refusal): what the sweeper
 * starts workflows for. A request that claimed nothing (refused before any claim, or answered
 * 503) owes nothing and is left alone.
 */
export async function unstartedSettlements(
  db: pg.Pool,
  olderThanMs: number,
  limit: number,
): Promise<Array<{ key: string; payer: string; summary: string }>> {
  const { rows } = await db.query<{ settlement_key: string; request: SettleRequest }>(
    `select r.settlement_key, r.request from settle_requests r
     where r.workflow_started_at is null and r.created_at < now() - make_interval(secs => $1::double precision / 1000)
       and (r.refused_cause is not null or exists (select 1 from settlements s where s.settlement_key = r.settlement_key))
     order by r.created_at limit $2`,
    [olderThanMs, limit],
  );
  return rows.map((r) => ({ key: r.settlement_key, ...workflowLabels(r.request) }));
}

/** The search attribute and summary of a settlement's workflow, from its request (no signature). */
export function workflowLabels(request: SettleRequest): { payer: string; summary: string } {
  const a = request.paymentPayload.payload.authorization;
  const payer = getAddress(a.from.toLowerCase());
  return { payer, summary: `${a.value} to ${request.paymentRequirements.payTo} from ${payer}` };
}

/** Makes a refusal durable on the request (the first cause stays). */
export async function markRefused(db: pg.Pool, key: string, cause: string): Promise<void> {
  await db.query('update settle_requests set refused_cause = coalesce(refused_cause, $2) where settlement_key = $1', [
    key,
    cause,
  ]);
}

// ---- settlement records ----

export async function findSettlement(db: pg.Pool | pg.PoolClient, key: string): Promise<SettlementRecord | null> {
  const { rows } = await db.query<SettlementRow>('select * from settlements where settlement_key = $1', [key]);
  return rows[0] ? fromRow(rows[0]) : null;
}

/**
 * The record (if any) and whether a request for the key was stored before, in one query: what
 * the /settle handler's outbox run needs to know before it claims.
 */
export async function findSettlementState(
  db: pg.Pool,
  key: string,
): Promise<{ record: SettlementRecord | null; requestStored: boolean }> {
  const { rows } = await db.query<SettlementRow & { request_stored: boolean }>(
    `select s.*, exists (select 1 from settle_requests r where r.settlement_key = $1) as request_stored
     from (select $1::text as k) q left join settlements s on s.settlement_key = q.k`,
    [key],
  );
  const row = rows[0];
  return { record: row?.id ? fromRow(row) : null, requestStored: row?.request_stored === true };
}

export type ClaimInput = {
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
   * The transaction signed ahead with the gas nonce this settlement is predicted to get. The
   * claim statement then also takes that nonce and stores the bytes (one round trip for claim,
   * nonce and bytes), but only if the wallet's next nonce is still the prediction; otherwise
   * the record is claimed without bytes and signing takes the nonce under the row lock
   * (signAndPersist), as it always did.
   */
  presigned?: PresignedTransaction;
  /**
   * The outbox (a /settle handler claiming before its workflow exists): the request, stored as
   * the claim check by the same statement (first writer wins), so the claim and its claim check
   * commit together. A refusal stores it too, carrying the refusal.
   */
  request?: SettleRequest;
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

/** `raced`: the settlement was claimed by another run meanwhile; the record is theirs. */
export type ClaimResult = { claimed: SettlementRecord; raced?: true } | { rejected: GuardrailRejection };

/**
 * Guardrails, then the nonce claim: the account's allowed kinds and per-transaction maximum
 * (checked here), then the reservation against its daily ceiling and the claim row in ONE
 * statement, so both commit or neither does. The reservation is a conditional upsert: concurrent
 * settles of one account serialize on the usage row and each re-checks the ceiling, so they
 * cannot overshoot it. Rejected: nothing is written. Already claimed: the existing record.
 */
export async function reserveAndClaim(db: pg.Pool, input: ClaimInput): Promise<ClaimResult> {
  const result = await tryClaim(db, input);
  // A refusal claims nothing and writes no settlement row; it is made durable on the request
  // (a run started later, e.g. by the sweeper, answers it instead of claiming afresh) and
  // announced in the same statement, so the caller waiting on the key answers 429 at once.
  if ('rejected' in result) {
    const refusal: AnnouncedOutcome = {
      key: input.key,
      status: 'rejected',
      payer: input.payer.toLowerCase(),
      tx: null,
      cause: result.rejected,
    };
    await db.query(
      `with marked as (
         insert into settle_requests as r (settlement_key, account_id, request, refused_cause)
         select $4, $5, $6::jsonb, $3 where $6::jsonb is not null
         on conflict (settlement_key) do update set refused_cause = coalesce(r.refused_cause, excluded.refused_cause)
         returning 1
       ),
       updated as (update settle_requests set refused_cause = coalesce(refused_cause, $3) where settlement_key = $4 and $6::jsonb is null returning 1)
       select pg_notify($1, $2), (select count(*) from marked), (select count(*) from updated)`,
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

async function tryClaim(db: pg.Pool, input: ClaimInput): Promise<ClaimResult> {
  const allowed = input.account.allowedKinds.some(
    (k) => k.network === input.kind.network && k.asset.toLowerCase() === input.kind.asset.toLowerCase(),
  );
  if (!allowed) return { rejected: 'kind_not_allowed' };
  if (input.amount > (input.account.maxPerTx ?? input.defaults.maxPerTx))
    return { rejected: 'over_per_transaction_maximum' };
  const ceiling = input.account.dailyCeiling ?? input.defaults.dailyCeiling;
  if (input.amount > ceiling) return { rejected: 'over_daily_ceiling' };

  const { chainId, token, nonce } = parseSettlementKey(input.key);
  const pre = input.presigned;
  try {
    // reserved: the conditional reservation (empty: over the ceiling, nothing is written).
    // taken (presigned only): the predicted gas nonce, taken under the wallet's row lock only
    // if it is still the wallet's next one. attempt: the stored bytes' first attempt row.
    // The settlement row carries the bytes exactly when the nonce was taken.
    const { rows } = await db.query<SettlementRow>(
      `with reserved as (
         insert into daily_usage as u (account_id, day, reserved, gas_at_risk_wei)
         select $7, (now() at time zone 'utc')::date, $9, $22::numeric where $22::numeric <= $21::numeric
         on conflict (account_id, day) do update set reserved = u.reserved + excluded.reserved, gas_at_risk_wei = u.gas_at_risk_wei + excluded.gas_at_risk_wei
           where u.reserved + excluded.reserved <= $11 and u.failed_gas_wei + u.gas_at_risk_wei + excluded.gas_at_risk_wei <= $21::numeric
         returning day
       ),
       taken as (
         insert into gas_wallets as w (address, chain_id, next_nonce)
         select $12::text, $13::integer, $15::bigint + 1 from reserved where $12::text is not null
         on conflict (address, chain_id) do update set next_nonce = excluded.next_nonce, updated_at = now()
           where greatest(w.next_nonce, $14::bigint) = $15::bigint
         returning next_nonce - 1 as nonce
       ),
       claimed as (
         insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before,
                                  status, usage_day, reserved_amount, gas_at_risk_wei, gas_wallet, gas_nonce, raw_tx, tx_hash)
         select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, case when taken.nonce is null then 'claimed' else 'signed' end,
                reserved.day, $9, $22::numeric, case when taken.nonce is null then null else $12::text end, taken.nonce,
                case when taken.nonce is null then null else $16::text end, case when taken.nonce is null then null else $17::text end
         from reserved left join taken on true
         returning *
       ),
       attempt as (
         insert into settlement_transactions (settlement_key, seq, tx_hash, raw_tx, max_fee_per_gas, max_priority_fee_per_gas)
         select settlement_key, 0, tx_hash, raw_tx, $18::numeric, $19::numeric from claimed where tx_hash is not null
       ),
       stored as (
         insert into settle_requests (settlement_key, account_id, request)
         select $2, $7, $20::jsonb where $20::jsonb is not null
         on conflict (settlement_key) do nothing
       )
       select * from claimed`,
      [
        `stl_${uuidv7()}`,
        input.key,
        chainId,
        token,
        input.payer.toLowerCase(),
        nonce,
        input.account.id,
        input.payTo.toLowerCase(),
        input.amount.toString(),
        input.validBefore.toString(),
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
      ],
    );
    if (rows.length === 0) {
      const overGas = await overFailedGasBudget(
        db,
        input.account.id,
        input.gasAtRiskWei,
        input.defaults.failedGasDailyWei,
      );
      return { rejected: overGas ? 'over_failed_gas_budget' : 'over_daily_ceiling' };
    }
    return { claimed: fromRow(rows[0]) };
  } catch (err) {
    // Claimed meanwhile (a resumed run racing a zombie worker): the statement rolled back as a
    // whole, reservation included; the existing claim stands.
    if ((err as { code?: string }).code !== '23505') throw err;
    const existing = await findSettlement(db, input.key);
    if (!existing) throw err;
    return { claimed: existing, raced: true };
  }
}

/**
 * A settlement rejected by re-verification before any claim: recorded as failed (with the
 * precise cause, for operators) without a reservation, so duplicates get the same answer.
 */
export async function recordRejected(
  db: pg.Pool,
  // request: the outbox's claim check, stored with the record (see ClaimInput.request).
  input: {
    key: string;
    accountId: string;
    payer: string;
    payTo: string;
    amount: bigint;
    validBefore: bigint;
    cause: string;
    request?: SettleRequest;
  },
): Promise<SettlementRecord> {
  const { chainId, token, nonce } = parseSettlementKey(input.key);
  await db.query(
    `with stored as (
       insert into settle_requests (settlement_key, account_id, request)
       select $2, $7, $12::jsonb where $12::jsonb is not null
       on conflict (settlement_key) do nothing
     )
     insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before,
                              status, failure_cause, completed_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'failed', $11, now())
     on conflict (settlement_key) do nothing`,
    [
      `stl_${uuidv7()}`,
      input.key,
      chainId,
      token,
      input.payer.toLowerCase(),
      nonce,
      input.accountId,
      input.payTo.toLowerCase(),
      input.amount.toString(),
      input.validBefore.toString(),
      input.cause,
      input.request ? JSON.stringify(input.request) : null,
    ],
  );
  await notifyOutcome(db, input.key);
  return (await findSettlement(db, input.key))!;
}

/**
 * Takes the gas wallet's next nonce, signs the transaction with it and stores the raw bytes
 * and hash, all under the gas wallet's row lock: one nonce at a time, and nothing is ever
 * sent that is not stored first. Idempotent: a record that already has its bytes keeps them.
 */
export async function signAndPersist(
  db: pg.Pool,
  input: {
    key: string;
    gasWallet: string;
    chainId: number;
    /** The node's pending transaction count; wins over the stored nonce if the wallet was used elsewhere. */
    chainNonce: number;
    sign: (nonce: number) => Promise<{ raw: string; hash: string }>;
  },
): Promise<SettlementRecord> {
  return inTransaction(db, async (client) => {
    const { rows } = await client.query<SettlementRow>(
      'select * from settlements where settlement_key = $1 for update',
      [input.key],
    );
    const record = rows[0] ? fromRow(rows[0]) : null;
    if (!record) throw new Error('settlement record missing for signing');
    if (record.rawTx || record.status !== 'claimed') return record;

    // Take the next gas nonce (the stored one, or the node's count if that is higher: the wallet
    // was used elsewhere) in one statement that also locks the wallet's row until commit.
    const address = input.gasWallet.toLowerCase();
    const taken = await client.query<{ nonce: string }>(
      `insert into gas_wallets as w (address, chain_id, next_nonce) values ($1, $2, $3::bigint + 1)
       on conflict (address, chain_id) do update set next_nonce = greatest(w.next_nonce, $3::bigint) + 1, updated_at = now()
       returning next_nonce - 1 as nonce`,
      [address, input.chainId, input.chainNonce],
    );
    const nonce = Number(taken.rows[0].nonce);
    const signed = await input.sign(nonce);
    const fees = Transaction.from(signed.raw);
    const updated = await client.query<SettlementRow>(
      `with attempt as (
         insert into settlement_transactions (settlement_key, seq, tx_hash, raw_tx, max_fee_per_gas, max_priority_fee_per_gas)
         values ($1, 0, $5, $4, $6, $7)
       )
       update settlements set status = 'signed', gas_wallet = $2, gas_nonce = $3, raw_tx = $4, tx_hash = $5, updated_at = now()
       where settlement_key = $1 returning *`,
      [
        input.key,
        address,
        nonce,
        signed.raw,
        signed.hash,
        fees.maxFeePerGas?.toString() ?? null,
        fees.maxPriorityFeePerGas?.toString() ?? null,
      ],
    );
    return fromRow(updated.rows[0]);
  });
}

/** The gas wallet's stored next nonce (null before its first transaction), for predicting the next claim's. */
export async function storedGasNonce(db: pg.Pool, gasWallet: string, chainId: number): Promise<number | null> {
  const { rows } = await db.query<{ next_nonce: string }>(
    'select next_nonce from gas_wallets where address = $1 and chain_id = $2',
    [gasWallet.toLowerCase(), chainId],
  );
  return rows[0] ? Number(rows[0].next_nonce) : null;
}

/** One signed transaction of a settlement: seq 0 is the first, each fee bump adds one with the same gas nonce. */
export type SignedAttempt = {
  seq: number;
  txHash: string;
  rawTx: string;
  maxFeePerGas: bigint | null;
  maxPriorityFeePerGas: bigint | null;
};

/** Every transaction signed for the settlement, oldest first (any of them may be the one mined). */
export async function signedAttempts(db: pg.Pool, key: string): Promise<SignedAttempt[]> {
  const { rows } = await db.query<{
    seq: number;
    tx_hash: string;
    raw_tx: string;
    max_fee_per_gas: string | null;
    max_priority_fee_per_gas: string | null;
  }>(
    'select seq, tx_hash, raw_tx, max_fee_per_gas, max_priority_fee_per_gas from settlement_transactions where settlement_key = $1 order by seq',
    [key],
  );
  return rows.map((r) => ({
    seq: r.seq,
    txHash: r.tx_hash,
    rawTx: r.raw_tx,
    maxFeePerGas: r.max_fee_per_gas === null ? null : BigInt(r.max_fee_per_gas),
    maxPriorityFeePerGas: r.max_priority_fee_per_gas === null ? null : BigInt(r.max_priority_fee_per_gas),
  }));
}

/**
 * Stores a fee bump (the same gas nonce re-signed with higher fees) as attempt `seq`, and makes
 * it the bytes later re-sends use, before it is ever sent. Only a record still waiting for
 * inclusion takes one; a second writer of the same seq (a retried activity) keeps the first.
 * Returns the stored attempt of that seq, or null when the record no longer waits.
 */
export async function storeFeeBump(db: pg.Pool, key: string, attempt: SignedAttempt): Promise<SignedAttempt | null> {
  const { rows } = await db.query<{ tx_hash: string }>(
    `with waiting as (
       select settlement_key from settlements where settlement_key = $1 and status in ('signed', 'broadcast', 'pending') for update
     ),
     added as (
       insert into settlement_transactions (settlement_key, seq, tx_hash, raw_tx, max_fee_per_gas, max_priority_fee_per_gas)
       select settlement_key, $2, $3, $4, $5, $6 from waiting
       on conflict (settlement_key, seq) do nothing
       returning settlement_key
     )
     update settlements s set raw_tx = $4, tx_hash = $3, updated_at = now() from added where s.settlement_key = added.settlement_key
     returning s.tx_hash`,
    [
      key,
      attempt.seq,
      attempt.txHash,
      attempt.rawTx,
      attempt.maxFeePerGas?.toString() ?? null,
      attempt.maxPriorityFeePerGas?.toString() ?? null,
    ],
  );
  if (rows.length > 0) return attempt;
  return (await signedAttempts(db, key)).find((a) => a.seq === attempt.seq) ?? null;
}

/** Counts one send of the stored bytes. */
export async function markBroadcast(db: pg.Pool, key: string): Promise<void> {
  await db.query(
    `update settlements set attempts = attempts + 1, updated_at = now(),
            status = case when status = 'signed' then 'broadcast' else status end
     where settlement_key = $1`,
    [key],
  );
}

/** Whether this settlement's gas at risk does not fit the account's failed-gas budget today (asked only once a reservation was refused). */
async function overFailedGasBudget(
  db: pg.Pool,
  accountId: string,
  atRiskWei: bigint,
  budgetWei: bigint,
): Promise<boolean> {
  const { rows } = await db.query<{ spent: string }>(
    `select failed_gas_wei + gas_at_risk_wei as spent from daily_usage where account_id = $1 and day = (now() at time zone 'utc')::date`,
    [accountId],
  );
  return BigInt(rows[0]?.spent ?? 0) + atRiskWei > budgetWei;
}

/** Gas burned today by the account's settlements that reverted on chain (wei). */
export async function failedGasToday(db: pg.Pool): Promise<Map<string, bigint>> {
  const { rows } = await db.query<{ account_id: string; failed_gas_wei: string }>(
    `select account_id, failed_gas_wei from daily_usage where day = (now() at time zone 'utc')::date and failed_gas_wei > 0`,
  );
  return new Map(rows.map((r) => [r.account_id, BigInt(r.failed_gas_wei)]));
}

export type FinalOutcome =
  | { status: 'settled'; blockNumber: number; gasUsed: bigint; txHash?: string }
  /** `failedGasWei`: what a revert cost the gas wallet, charged to the account's failed-gas budget. */
  | { status: 'failed'; cause: string; blockNumber?: number; gasUsed?: bigint; txHash?: string; failedGasWei?: bigint }
  | { status: 'pending'; cause: string };

/**
 * Records the outcome, in one statement: a failure releases the daily reservation exactly once
 * (only a record not yet final is updated, and it gives back what it still holds); `pending`
 * keeps it, since the transfer may still land. The key is announced on OUTCOME_CHANNEL at
 * commit, for the /settle handlers waiting on it.
 */
export async function completeSettlement(
  db: pg.Pool,
  key: string,
  outcome: FinalOutcome,
): Promise<SettlementRecord & { completedNow: boolean }> {
  const block = 'blockNumber' in outcome ? (outcome.blockNumber ?? null) : null;
  const gasUsed = 'gasUsed' in outcome ? (outcome.gasUsed?.toString() ?? null) : null;
  const cause = outcome.status === 'settled' ? null : outcome.cause;
  const release = outcome.status === 'failed';
  // The attempt that was mined becomes the record's transaction (a fee bump may have won).
  const mined = 'txHash' in outcome ? (outcome.txHash ?? null) : null;
  const { rows } = await db.query<SettlementRow>(
    `with prev as (
       select settlement_key, account_id, usage_day, reserved_amount, gas_at_risk_wei from settlements
       where settlement_key = $1 and status not in ('settled', 'failed') for update
     ),
     released as (
       update daily_usage d set reserved = case when $6::boolean and prev.reserved_amount > 0 then greatest(d.reserved - prev.reserved_amount, 0) else d.reserved end,
              failed_gas_wei = d.failed_gas_wei + coalesce($9::numeric, 0),
              gas_at_risk_wei = case when $2::text <> 'pending' then greatest(d.gas_at_risk_wei - prev.gas_at_risk_wei, 0) else d.gas_at_risk_wei end
       from prev where (($6::boolean and prev.reserved_amount > 0) or $9::numeric is not null or ($2::text <> 'pending' and prev.gas_at_risk_wei > 0))
         and d.account_id = prev.account_id and d.day = prev.usage_day
       returning 1
     ),
     done as (
       update settlements s set status = $2::text, failure_cause = $3::text, block_number = coalesce($4::bigint, s.block_number),
              tx_hash = coalesce($8::text, s.tx_hash),
              raw_tx = coalesce((select t.raw_tx from settlement_transactions t where t.tx_hash = $8::text), s.raw_tx),
              gas_used = coalesce($5::numeric, s.gas_used), reserved_amount = case when $6::boolean then 0 else s.reserved_amount end,
              gas_at_risk_wei = case when $2::text <> 'pending' then 0 else s.gas_at_risk_wei end,
              updated_at = now(), completed_at = case when $2::text = 'pending' then null else now() end
       from prev where s.settlement_key = prev.settlement_key
       returning s.*
     )
     select done.*, pg_notify($7, ${ANNOUNCEMENT('done')}) from done`,
    [
      key,
      outcome.status,
      cause,
      block,
      gasUsed,
      release,
      OUTCOME_CHANNEL,
      mined,
      'failedGasWei' in outcome ? (outcome.failedGasWei?.toString() ?? null) : null,
    ],
  );
  if (rows[0]) return { ...fromRow(rows[0]), completedNow: true };
  const current = await findSettlement(db, key);
  if (!current) throw new Error('settlement record missing');
  return { ...current, completedNow: false };
}
