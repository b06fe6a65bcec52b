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
 * Guardrails, then the nonce claim, in one transaction: the account's allowed kinds, its
 * per-transaction maximum, and an atomic reservation against its daily ceiling (a conditional
 * UPDATE, so concurrent settles of one account serialize on the usage row and cannot
 * overshoot). Rejected: nothing is written. Already claimed: the existing record.
 */
export async function reserveAndClaim(db: pg.Pool, input: ClaimInput): Promise<ClaimResult> {
  const { chainId, token, nonce } = parseSettlementKey(input.key);
  return inTransaction(db, async (client) => {
    const existing = await findSettlement(client, input.key);
    if (existing) return { claimed: existing };

    const allowed = input.account.allowedKinds.some(
      (k) => k.network === input.kind.network && k.asset.toLowerCase() === input.kind.asset.toLowerCase(),
    );
    if (!allowed) return { rejected: 'kind_not_allowed' };
    if (input.amount > (input.account.maxPerTx ?? input.defaults.maxPerTx)) return { rejected: 'over_per_transaction_maximum' };

    const ceiling = input.account.dailyCeiling ?? input.defaults.dailyCeiling;
    if (input.amount > ceiling) return { rejected: 'over_daily_ceiling' };
    // One statement: create today's usage row or add to it, only while it stays within the
    // ceiling. Concurrent reservations serialize on the row and each re-checks the condition.
    const reserved = await client.query<{ day: string }>(
      `insert into daily_usage as u (account_id, day, reserved) values ($1, (now() at time zone 'utc')::date, $2)
       on conflict (account_id, day) do update set reserved = u.reserved + excluded.reserved
         where u.reserved + excluded.reserved <= $3
       returning to_char(day, 'YYYY-MM-DD') as day`,
      [input.account.id, input.amount.toString(), ceiling.toString()],
    );
    if (reserved.rowCount === 0) return { rejected: 'over_daily_ceiling' };
    const { rows } = await client.query<SettlementRow>(
      `insert into settlements (id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before,
                                status, usage_day, reserved_amount)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'claimed', $11, $9)
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
        reserved.rows[0].day,
      ],
    );
    return { claimed: fromRow(rows[0]) };
  });
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

    const address = input.gasWallet.toLowerCase();
    await client.query(
      'insert into gas_wallets (address, chain_id, next_nonce) values ($1, $2, $3) on conflict (address, chain_id) do nothing',
      [address, input.chainId, input.chainNonce],
    );
    const wallet = await client.query<{ next_nonce: string }>(
      'select next_nonce from gas_wallets where address = $1 and chain_id = $2 for update',
      [address, input.chainId],
    );
    const nonce = Math.max(Number(wallet.rows[0].next_nonce), input.chainNonce);
    const signed = await input.sign(nonce);
    await client.query('update gas_wallets set next_nonce = $3, updated_at = now() where address = $1 and chain_id = $2', [
      address,
      input.chainId,
      nonce + 1,
    ]);
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
 * Records the outcome. A failure releases the daily reservation exactly once (the status
 * transition is the guard); `pending` keeps it, since the transfer may still land.
 */
export async function completeSettlement(db: pg.Pool, key: string, outcome: FinalOutcome): Promise<SettlementRecord> {
  return inTransaction(db, async (client) => {
    const { rows } = await client.query<SettlementRow & { usage_day_text: string | null; reserved_amount: string }>(
      `select *, to_char(usage_day, 'YYYY-MM-DD') as usage_day_text from settlements where settlement_key = $1 for update`,
      [key],
    );
    const row = rows[0];
    if (!row) throw new Error('settlement record missing');
    if (row.status === 'settled' || row.status === 'failed') return fromRow(row);

    const block = 'blockNumber' in outcome ? outcome.blockNumber ?? null : null;
    const gasUsed = 'gasUsed' in outcome ? outcome.gasUsed?.toString() ?? null : null;
    const cause = outcome.status === 'settled' ? null : outcome.cause;
    const release = outcome.status === 'failed' && BigInt(row.reserved_amount) > 0n;
    if (release && row.usage_day_text) {
      await client.query('update daily_usage set reserved = greatest(reserved - $3, 0) where account_id = $1 and day = $2::date', [
        row.account_id,
        row.usage_day_text,
        row.reserved_amount,
      ]);
    }
    const updated = await client.query<SettlementRow>(
      `update settlements set status = $2, failure_cause = $3, block_number = coalesce($4, block_number),
              gas_used = coalesce($5, gas_used), reserved_amount = case when $6 then 0 else reserved_amount end,
              updated_at = now(), completed_at = case when $2 = 'pending' then null else now() end
       where settlement_key = $1 returning *`,
      [key, outcome.status, cause, block, gasUsed, release],
    );
    return fromRow(updated.rows[0]);
  });
}
