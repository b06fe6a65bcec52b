// The settlement records: one row per authorization (UNIQUE chain, token, payer, nonce), its
// key, the outcome statement (which releases the reservation exactly once) and the NOTIFY
// announcement of it, so a retried activity or a second worker finds the work already done.
import type pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import type { SettlementRequest } from '../settlement/request.ts';

type SettlementStatus = 'claimed' | 'signed' | 'broadcast' | 'pending' | 'settled' | 'failed';

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
  /** It draws on the account's own failed-gas budget, not its payers' (request.ts drawsOwnGasBudget). */
  ownGas: boolean;
};

export type SettlementRow = {
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
  own_gas: boolean;
};

export function fromRow(row: SettlementRow): SettlementRecord {
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
    ownGas: row.own_gas === true,
  };
}

/** Workflow id and record key of one authorization: `settle:{chainId}:{token}:{payer}:{nonce}`, lowercase hex. */
export function settlementKey(chainId: number, token: string, payer: string, nonce: string): string {
  return `settle:${chainId}:${token.toLowerCase()}:${payer.toLowerCase()}:${nonce.toLowerCase()}`;
}

/** The prefix of an upto authorization's nonce in its key: a Permit2 nonce never shares a key (or a row) with an EIP-3009 one. */
const UPTO_NONCE_PREFIX = 'upto-';

/**
 * Workflow id and record key of an upto authorization: the same form, its nonce the Permit2 nonce
 * in 64 hex digits behind `upto-`, so the UNIQUE (chain, token, payer, nonce) row can never be an
 * exact settlement's.
 */
export function uptoSettlementKey(chainId: number, token: string, payer: string, nonce: bigint): string {
  return settlementKey(chainId, token, payer, `${UPTO_NONCE_PREFIX}0x${nonce.toString(16).padStart(64, '0')}`);
}

/** Whether the key is an upto authorization's. */
export function isUptoKey(key: string): boolean {
  return parseSettlementKey(key).nonce.startsWith(UPTO_NONCE_PREFIX);
}

/** The Permit2 nonce an upto key names. */
export function uptoNonceOfKey(key: string): bigint {
  return BigInt(parseSettlementKey(key).nonce.slice(UPTO_NONCE_PREFIX.length));
}

/** The prefix of a batch-settlement claim's, settle's or refund's id in its key: never an authorization's nonce. */
const BATCH_ACTION_PREFIX = 'batch-';

/**
 * Workflow id and record key of a batch-settlement claim, settle or refund: the same form, its
 * party (a claim's first receiver, a settle's receiver, a refund's payer) in the payer's place
 * and, in the nonce's, the action and what makes it one settlement (a claim: its ClaimBatch
 * digest and the UTC day it is asked on; a settle: the receiver's claimed total it sweeps up to
 * and the day; a refund: the channel and its refund nonce). A retry of the same request names
 * the same settlement. A deposit is keyed by its ERC-3009 authorization's nonce, as an exact
 * payment is (settlementKey): the token's nonce is one.
 */
export function batchActionKey(
  chainId: number,
  token: string,
  party: string,
  action: 'claim' | 'settle' | 'refund',
  id: string,
): string {
  return settlementKey(chainId, token, party, `${BATCH_ACTION_PREFIX}${action}-${id}`);
}

/**
 * The key of a batch-settlement claim or settle, `keyOf` the day it is asked on (UTC, as
 * PostgreSQL's clock tells it: the day the account's limits count). A refusal by those limits is
 * kept for its key (a payer's authorization refused once is refused for good), and a claim is
 * named by its rows: without the day, a batch refused over the day's failed-gas budget would be
 * refused again every later day it is asked for unchanged (a payer with a withdrawal pending pays
 * no more calls, so its rows stay the same) until the withdrawal took what it was charged. The
 * same request asked yesterday that has a settlement (in flight across midnight, or done) keeps
 * that key: its retry is that settlement, never a second transaction. Only a request refused
 * yesterday (a refusal writes no settlement) or never asked is named by today.
 */
export async function batchActionDayKey(db: pg.Pool, keyOf: (day: string) => string): Promise<string> {
  const { rows } = await db.query<{ today: string; yesterday: string }>(
    `select (now() at time zone 'utc')::date::text as today, ((now() at time zone 'utc')::date - 1)::text as yesterday`,
  );
  const earlier = keyOf(rows[0]!.yesterday);
  return (await findSettlement(db, earlier)) ? earlier : keyOf(rows[0]!.today);
}

/** Whether the key is a batch-settlement claim's, settle's or refund's (no authorization of the payer's). */
export function isBatchActionKey(key: string): boolean {
  return parseSettlementKey(key).nonce.startsWith(BATCH_ACTION_PREFIX);
}

export function parseSettlementKey(key: string): { chainId: number; token: string; payer: string; nonce: string } {
  const [, chainId, token, payer, nonce] = key.split(':');
  return { chainId: Number(chainId), token, payer, nonce };
}

/** What a new settlement row is made of: the authorization (from its key) and the request's terms. */
type NewSettlement = Pick<SettlementRecord, 'key' | 'accountId' | 'payer' | 'payTo' | 'amount' | 'validBefore'>;

/** The first columns of a new settlement row; every statement that inserts one binds them as $1 to $10. */
export const NEW_SETTLEMENT_COLUMNS =
  'id, settlement_key, chain_id, token, payer, nonce, account_id, pay_to, amount, valid_before';

/** The values of NEW_SETTLEMENT_COLUMNS: a fresh id, the key and what it names, addresses in lowercase. */
export function newSettlementValues(row: NewSettlement): Array<string | number> {
  const { chainId, token, nonce } = parseSettlementKey(row.key);
  return [
    `stl_${uuidv7()}`,
    row.key,
    chainId,
    token,
    row.payer.toLowerCase(),
    nonce,
    row.accountId,
    row.payTo.toLowerCase(),
    row.amount.toString(),
    row.validBefore.toString(),
  ];
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

/**
 * A settlement decided by re-verification before any claim, recorded without a reservation or a
 * transaction, so duplicates get the same answer: failed (with the precise cause, for
 * operators), or settled when nothing is to move (an upto charge of 0).
 */
export async function recordRejected(
  db: pg.Pool,
  // request: the outbox's request, stored with the record (see ReservationInput.request, reservations.ts).
  input: NewSettlement & { cause: string | null; status?: 'failed' | 'settled'; request?: SettlementRequest },
): Promise<SettlementRecord> {
  await db.query(
    `with stored as (
       insert into settle_requests (settlement_key, account_id, request)
       select $2, $7, $12::jsonb where $12::jsonb is not null
       on conflict (settlement_key) do nothing
     )
     insert into settlements (${NEW_SETTLEMENT_COLUMNS}, status, failure_cause, completed_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $13, $11, now())
     on conflict (settlement_key) do nothing`,
    [
      ...newSettlementValues(input),
      input.cause,
      input.request ? JSON.stringify(input.request) : null,
      input.status ?? 'failed',
    ],
  );
  await notifyOutcome(db, input.key);
  return (await findSettlement(db, input.key))!;
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

/**
 * `failedGasWei`: what the revert `revertTxHash` cost the gas wallet, charged to the account's
 * failed-gas budget the settlement draws on (its own or its payers': settlements.own_gas) once
 * per reverted transaction (also when someone else's transaction settled it, and while a revert
 * keeps the settlement pending).
 */
type RevertCharge = { failedGasWei?: bigint; revertTxHash?: string };

export type FinalOutcome =
  | ({ status: 'settled'; blockNumber: number; gasUsed: bigint; txHash?: string } & RevertCharge)
  | ({ status: 'failed'; cause: string; blockNumber?: number; gasUsed?: bigint; txHash?: string } & RevertCharge)
  | ({ status: 'pending'; cause: string; txHash?: string } & RevertCharge);

/**
 * Records the outcome, in one statement: a failure releases the daily reservation exactly once
 * (only a record not yet final is updated, and it gives back what it still holds); `pending`
 * keeps it, since the transfer may still land. A revert's gas is charged once per reverted
 * transaction (`charged_revert_tx`). The key is announced on OUTCOME_CHANNEL at commit, for the
 * /settle handlers waiting on it. `gasChargedNow`: this statement charged the revert's gas.
 */
export async function completeSettlement(
  db: pg.Pool,
  key: string,
  outcome: FinalOutcome,
): Promise<SettlementRecord & { completedNow: boolean; gasChargedNow: boolean }> {
  const block = 'blockNumber' in outcome ? (outcome.blockNumber ?? null) : null;
  const gasUsed = 'gasUsed' in outcome ? (outcome.gasUsed?.toString() ?? null) : null;
  const cause = outcome.status === 'settled' ? null : outcome.cause;
  const release = outcome.status === 'failed';
  // The attempt that was mined becomes the record's transaction (a fee bump may have won).
  const mined = outcome.txHash ?? null;
  const charge = outcome.failedGasWei === undefined ? null : outcome.failedGasWei.toString();
  const { rows } = await db.query<SettlementRow & { gas_charged: boolean }>(
    `with prev as (
       select settlement_key, account_id, usage_day, reserved_amount, gas_at_risk_wei, own_gas,
              ($9::numeric is not null and charged_revert_tx is distinct from lower($10::text)) as charge
       from settlements
       where settlement_key = $1 and status not in ('settled', 'failed') for update
     ),
     released as (
       update daily_usage d set reserved = case when $6::boolean and prev.reserved_amount > 0 then greatest(d.reserved - prev.reserved_amount, 0) else d.reserved end,
              failed_gas_wei = d.failed_gas_wei + case when prev.charge and not prev.own_gas then $9::numeric else 0 end,
              gas_at_risk_wei = case when $2::text <> 'pending' and not prev.own_gas then greatest(d.gas_at_risk_wei - prev.gas_at_risk_wei, 0) else d.gas_at_risk_wei end,
              own_failed_gas_wei = d.own_failed_gas_wei + case when prev.charge and prev.own_gas then $9::numeric else 0 end,
              own_gas_at_risk_wei = case when $2::text <> 'pending' and prev.own_gas then greatest(d.own_gas_at_risk_wei - prev.gas_at_risk_wei, 0) else d.own_gas_at_risk_wei end
       from prev where (($6::boolean and prev.reserved_amount > 0) or prev.charge or ($2::text <> 'pending' and prev.gas_at_risk_wei > 0))
         and d.account_id = prev.account_id and d.day = prev.usage_day
       returning 1
     ),
     done as (
       update settlements s set status = $2::text, failure_cause = $3::text, block_number = coalesce($4::bigint, s.block_number),
              tx_hash = coalesce($8::text, s.tx_hash),
              raw_tx = coalesce((select t.raw_tx from settlement_transactions t where t.tx_hash = $8::text), s.raw_tx),
              gas_used = coalesce($5::numeric, s.gas_used), reserved_amount = case when $6::boolean then 0 else s.reserved_amount end,
              gas_at_risk_wei = case when $2::text <> 'pending' then 0 else s.gas_at_risk_wei end,
              charged_revert_tx = case when prev.charge then lower($10::text) else s.charged_revert_tx end,
              updated_at = now(), completed_at = case when $2::text = 'pending' then null else now() end
       from prev where s.settlement_key = prev.settlement_key
       returning s.*, prev.charge as gas_charged
     )
     select done.*, pg_notify($7, ${ANNOUNCEMENT('done')}) from done`,
    [key, outcome.status, cause, block, gasUsed, release, OUTCOME_CHANNEL, mined, charge, outcome.revertTxHash ?? null],
  );
  if (rows[0]) return { ...fromRow(rows[0]), completedNow: true, gasChargedNow: rows[0].gas_charged };
  const current = await findSettlement(db, key);
  if (!current) throw new Error('settlement record missing');
  return { ...current, completedNow: false, gasChargedNow: false };
}

/**
 * Settlements signed (sent or not) that no statement touched for `idleMs`: longer than a live run
 * leaves one so (its confirm step records an outcome within its bound, and every send touches
 * the record), so its run is gone: a workflow an operator terminated before the bytes reached the
 * chain, say. Such bytes hold the gas wallet's nonce, and every later settlement of the wallet
 * waits behind it. Not one whose request was refused: its caller was told it failed (a run
 * that gave up before signing, raced by bytes signed after all), so sending them would charge
 * the payer for nothing. Each is touched as it is returned, so it comes back only after another
 * `idleMs`.
 */
export async function idleInFlight(db: pg.Pool, idleMs: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ settlement_key: string }>(
    `update settlements set updated_at = now()
     where settlement_key in (
       select s.settlement_key from settlements s
       where s.status in ('signed', 'broadcast') and s.updated_at < now() - make_interval(secs => $1::double precision / 1000)
         and not exists (select 1 from settle_requests r where r.settlement_key = s.settlement_key and r.refused_cause is not null)
       order by s.updated_at limit $2 for update of s skip locked)
     returning settlement_key`,
    [idleMs, limit],
  );
  return rows.map((r) => r.settlement_key);
}

/**
 * Pending settlements whose validBefore is more than `marginMs` behind the database's clock and
 * that no statement touched for as long: a watcher decides such a record within seconds of the
 * chain passing validBefore (it can no longer land), so one still pending has lost its watcher
 * (or the chain stalls). Each is touched as it is returned, so it comes back only after another
 * `marginMs`.
 */
export async function overduePending(db: pg.Pool, marginMs: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ settlement_key: string }>(
    `update settlements set updated_at = now()
     where settlement_key in (
       select settlement_key from settlements
       where status = 'pending' and updated_at < now() - make_interval(secs => $1::double precision / 1000)
         and valid_before < extract(epoch from now()) - $1::double precision / 1000
       order by updated_at limit $2 for update skip locked)
     returning settlement_key`,
    [marginMs, limit],
  );
  return rows.map((r) => r.settlement_key);
}
