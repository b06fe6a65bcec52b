// The facilitator's settlement records. Every state change is one conditional SQL statement
// or one short transaction, so a retried activity (or a second worker after a crash) finds
// the work already done instead of doing it twice:
// - UNIQUE (chain, token, payer, nonce): one settlement per authorization;
// - the daily reservation and the claim commit together, or neither does;
// - the gas nonce is taken under the gas wallet's row lock and the signed bytes are stored
//   with it before anything is sent; UNIQUE (gas_wallet, gas_nonce): one transaction per nonce.
import type pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { inTransaction } from './db/pool.ts';
import type { Account, AccountKind } from './accounts.ts';
import type { SettleRequest } from './x402/schemas.ts';

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
export type AnnouncedOutcome = { key: string; status: SettlementStatus | 'rejected'; payer: string; tx: string | null; cause: string | null };

// Builds the payload in SQL from the row `r`, so the announcement is exactly what was committed.
const ANNOUNCEMENT = (r: string) =>
  `json_build_object('key', ${r}.settlement_key, 'status', ${r}.status, 'payer', ${r}.payer, 'tx', ${r}.tx_hash, 'cause', ${r}.failure_cause)::text`;

async function notifyOutcome(db: pg.Pool | pg.PoolClient, key: string): Promise<void> {
  await db.query(`select pg_notify($1, ${ANNOUNCEMENT('s')}) from settlements s where s.settlement_key = $2`, [OUTCOME_CHANNEL, key]);
}

// ---- claim check of the signed request ----

export async function saveSettleRequest(db: pg.Pool, key: string, accountId: string, request: SettleRequest): Promise<void> {
  // First writer wins: any later request for the key carries a signature over the same
  // authorization (the handler checked it), so keeping the first loses nothing.
  await db.query(
    'insert into settle_requests (settlement_key, account_id, request) values ($1, $2, $3) on conflict (settlement_key) do nothing',
    [key, accountId, JSON.stringify(request)],
  );
}

export async function loadSettleRequest(db: pg.Pool, key: string): Promise<{ accountId: string; request: SettleRequest } | null> {
  const { rows } = await db.query<{ account_id: string; request: SettleRequest }>(
    'select account_id, request from settle_requests where settlement_key = $1',
    [key],
  );
  return rows[0] ? { accountId: rows[0].account_id, request: rows[0].request } : null;
}

// ---- settlement records ----

export async function findSettlement(db: pg.Pool | pg.PoolClient, key: string): Promise<SettlementRecord | null> {
  const { rows } = await db.query<SettlementRow>('select * from settlements where settlement_key = $1', [key]);
  return rows[0] ? fromRow(rows[0]) : null;
}

export type ClaimInput = {
  key: string;
  account: Account;
  kind: AccountKind;
  payer: string;
  payTo: string;
  amount: bigint;
  validBefore: bigint;
  defaults: { maxPerTx: bigint; dailyCeiling: bigint };
};

export type GuardrailRejection = 'kind_not_allowed' | 'over_per_transaction_maximum' | 'over_daily_ceiling';

export type ClaimResult = { claimed: SettlementRecord } | { rejected: GuardrailRejection };

/**
 * Guardrails, then the nonce claim: the account's allowed kinds and per-transaction maximum
 * (checked here), then the reservation against its daily ceiling and the claim row in ONE
 * statement, so both commit or neither does. The reservation is a conditional upsert: concurrent
 * settles of one account serialize on the usage row and each re-checks the ceiling, so they
 * cannot overshoot it. Rejected: nothing is written. Already claimed: the existing record.
 */
export async function reserveAndClaim(db: pg.Pool, input: ClaimInput): Promise<ClaimResult> {
  const result = await tryClaim(db, input);
  // A refusal writes no record; it is announced all the same, so the caller waiting on the key
  // answers 429 without waiting for the workflow to close.
  if ('rejected' in result) {
    const refusal: AnnouncedOutcome = { key: input.key, status: 'rejected', payer: input.payer.toLowerCase(), tx: null, cause: result.rejected };
    await db.query('select pg_notify($1, $2)', [OUTCOME_CHANNEL, JSON.stringify(refusal)]);
  }
  return result;
}

async function tryClaim(db: pg.Pool, input: ClaimInput): Promise<ClaimResult> {
  const allowed = input.account.allowedKinds.some(
    (k) => k.network === input.kind.network && k.asset.toLowerCase() === input.kind.asset.toLowerCase(),
  );
  if (!allowed) return { rejected: 'kind_not_allowed' };
  if (input.amount > (input.account.maxPerTx ?? input.defaults.maxPerTx)) return { rejected: 'over_per_transaction_maximum' };
  const ceiling = input.account.dailyCeiling ?? input.defaults.dailyCeiling;
  if (input.amount > ceiling) return { rejected: 'over_daily_ceiling' };

  const { chainId, token, nonce } = parseSettlementKey(input.key);
  try {
    const { rows } = await db.query<SettlementRow>(
      `with reserved as (
         insert into daily_usage as u (account_id, day, reserved) values ($7, (now() at time zone 'utc')::date, $9)
         on conflict (account_id, day) do update set reserved = u.reserved + excluded.reserved
           where u.reserved + excluded.reserved <= $11
         returning day
       )
       insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before,
                                status, usage_day, reserved_amount)
       select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'claimed', reserved.day, $9 from reserved
       returning *`,
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
      ],
    );
    if (rows.length === 0) return { rejected: 'over_daily_ceiling' };
    return { claimed: fromRow(rows[0]) };
  } catch (err) {
    // Claimed meanwhile (a resumed run racing a zombie worker): the statement rolled back as a
    // whole, reservation included; the existing claim stands.
    if ((err as { code?: string }).code !== '23505') throw err;
    const existing = await findSettlement(db, input.key);
    if (!existing) throw err;
    return { claimed: existing };
  }
}

/**
 * A settlement rejected by re-verification before any claim: recorded as failed (with the
 * precise cause, for operators) without a reservation, so duplicates get the same answer.
 */
export async function recordRejected(
  db: pg.Pool,
  input: { key: string; accountId: string; payer: string; payTo: string; amount: bigint; validBefore: bigint; cause: string },
): Promise<SettlementRecord> {
  const { chainId, token, nonce } = parseSettlementKey(input.key);
  await db.query(
    `insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before,
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
    const { rows } = await client.query<SettlementRow>('select * from settlements where settlement_key = $1 for update', [input.key]);
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
    const updated = await client.query<SettlementRow>(
      `update settlements set status = 'signed', gas_wallet = $2, gas_nonce = $3, raw_tx = $4, tx_hash = $5, updated_at = now()
       where settlement_key = $1 returning *`,
      [input.key, address, nonce, signed.raw, signed.hash],
    );
    return fromRow(updated.rows[0]);
  });
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

export type FinalOutcome =
  | { status: 'settled'; blockNumber: number; gasUsed: bigint }
  | { status: 'failed'; cause: string; blockNumber?: number; gasUsed?: bigint }
  | { status: 'pending'; cause: string };

/**
 * Records the outcome, in one statement: a failure releases the daily reservation exactly once
 * (only a record not yet final is updated, and it gives back what it still holds); `pending`
 * keeps it, since the transfer may still land. The key is announced on OUTCOME_CHANNEL at
 * commit, for the /settle handlers waiting on it.
 */
export async function completeSettlement(db: pg.Pool, key: string, outcome: FinalOutcome): Promise<SettlementRecord> {
  const block = 'blockNumber' in outcome ? outcome.blockNumber ?? null : null;
  const gasUsed = 'gasUsed' in outcome ? outcome.gasUsed?.toString() ?? null : null;
  const cause = outcome.status === 'settled' ? null : outcome.cause;
  const release = outcome.status === 'failed';
  const { rows } = await db.query<SettlementRow>(
    `with prev as (
       select settlement_key, account_id, usage_day, reserved_amount from settlements
       where settlement_key = $1 and status not in ('settled', 'failed') for update
     ),
     released as (
       update daily_usage d set reserved = greatest(d.reserved - prev.reserved_amount, 0)
       from prev where $6::boolean and prev.reserved_amount > 0 and d.account_id = prev.account_id and d.day = prev.usage_day
       returning 1
     ),
     done as (
       update settlements s set status = $2::text, failure_cause = $3::text, block_number = coalesce($4::bigint, s.block_number),
              gas_used = coalesce($5::numeric, s.gas_used), reserved_amount = case when $6::boolean then 0 else s.reserved_amount end,
              updated_at = now(), completed_at = case when $2::text = 'pending' then null else now() end
       from prev where s.settlement_key = prev.settlement_key
       returning s.*
     )
     select done.*, pg_notify($7, ${ANNOUNCEMENT('done')}) from done`,
    [key, outcome.status, cause, block, gasUsed, release, OUTCOME_CHANNEL],
  );
  if (rows[0]) return fromRow(rows[0]);
  const current = await findSettlement(db, key);
  if (!current) throw new Error('settlement record missing');
  return current;
}
