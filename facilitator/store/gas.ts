// The gas wallet's transactions: the next gas nonce taken under the wallet's row lock with the
// signed bytes stored before anything is sent (UNIQUE gas_wallet, gas_nonce), fee bumps at
// that nonce, and the transfer submitted again at a new nonce after its cancel was mined.
import type pg from 'pg';
import { Transaction } from 'ethers';
import { inTransaction } from '../db/pool.ts';
import { fromRow, type SettlementRecord, type SettlementRow } from './records.ts';

type NextNonceSigning = {
  key: string;
  gasWallet: string;
  chainId: number;
  /** The node's pending transaction count; wins over the stored nonce if the wallet was used elsewhere. */
  chainNonce: number;
  sign: (nonce: number) => Promise<{ raw: string; hash: string }>;
};

/**
 * Takes the gas wallet's next nonce, signs the transaction with it and stores the raw bytes
 * and hash, all under the gas wallet's row lock: one nonce at a time, and nothing is ever
 * sent that is not stored first. Idempotent: a record that already has its bytes keeps them.
 */
export async function signAndPersist(db: pg.Pool, input: NextNonceSigning): Promise<SettlementRecord> {
  const record = await signAtNextNonce(db, input, (r) => !r.rawTx && r.status === 'claimed');
  if (!record) throw new Error('settlement record missing for signing');
  return record;
}

/**
 * The transfer submitted again after its cancel was mined: signed with the gas wallet's next
 * nonce and stored as the settlement's next attempt (its bytes and gas nonce become the
 * record's), under the settlement's and the wallet's row locks, before anything is sent. Only
 * a record still at gas nonce `fromGasNonce` and not final takes it, so two workers that saw
 * the same mined cancel submit once. Returns the record as it now is (null: none).
 */
export function storeResubmission(
  db: pg.Pool,
  input: NextNonceSigning & { fromGasNonce: number },
): Promise<SettlementRecord | null> {
  return signAtNextNonce(
    db,
    input,
    (r) => r.gasNonce === input.fromGasNonce && r.status !== 'settled' && r.status !== 'failed',
  );
}

/**
 * Under the settlement's row lock, and only when `takes` the record as it is: the wallet's next
 * nonce (the stored one, or the node's count if that is higher: the wallet was used elsewhere;
 * taken in one statement that also locks the wallet's row until commit), the bytes signed with
 * it, stored as the settlement's next attempt and as the record's bytes. Else the record as is.
 */
async function signAtNextNonce(
  db: pg.Pool,
  input: NextNonceSigning,
  takes: (record: SettlementRecord) => boolean,
): Promise<SettlementRecord | null> {
  return inTransaction(db, async (client) => {
    const { rows } = await client.query<SettlementRow>(
      'select * from settlements where settlement_key = $1 for update',
      [input.key],
    );
    const record = rows[0] ? fromRow(rows[0]) : null;
    if (!record || !takes(record)) return record;
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
         select $1, coalesce(max(seq), -1) + 1, $5, $4, $6, $7 from settlement_transactions where settlement_key = $1
       )
       update settlements set status = case when status = 'claimed' then 'signed' else status end,
              gas_wallet = $2, gas_nonce = $3, raw_tx = $4, tx_hash = $5, updated_at = now()
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
 * inclusion, at the gas nonce of these bytes, takes one: a watcher still looking at the round
 * before a re-submission (the earlier nonce, whose cancel was mined) must not put that round's
 * bytes back in place of the submitted transfer. A second writer of the same seq (a retried
 * activity) keeps the first. Returns the stored attempt of that seq, or null when the record no
 * longer waits at that nonce.
 */
export async function storeFeeBump(db: pg.Pool, key: string, attempt: SignedAttempt): Promise<SignedAttempt | null> {
  const { nonce } = Transaction.from(attempt.rawTx);
  const { rows } = await db.query<{ tx_hash: string }>(
    `with waiting as (
       select settlement_key from settlements
       where settlement_key = $1 and status in ('signed', 'broadcast', 'pending') and gas_nonce = $7
       for update
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
      nonce,
    ],
  );
  if (rows.length > 0) return attempt;
  return (
    (await signedAttempts(db, key)).find((a) => a.seq === attempt.seq && Transaction.from(a.rawTx).nonce === nonce) ??
    null
  );
}
