// The facilitator's own schema, in its own database (FACILITATOR_DATABASE_URL): accounts,
// the claim-checked settle requests, the settlement records, daily guardrail usage and the
// gas wallet's nonce. Plain SQL on purpose: the UNIQUE constraints and CHECKs are the
// guarantees (one settlement per authorization, one transaction per gas nonce). Applied in
// order under an advisory lock, so the HTTPS process, the worker and the CLI may all run them.
import type pg from 'pg';
import { databaseProblem, exitOnDatabaseProblem } from '../../lib/database-check.ts';

type Migration = { name: string; sql: string[] };

const facilitatorMigrations: Migration[] = [
  {
    name: '0001_init',
    sql: [
      `create table facilitator_accounts (
        id text primary key,
        name text not null,
        cert_fingerprint text not null unique check (cert_fingerprint ~ '^[0-9a-f]{64}$'),
        allowed_kinds jsonb not null,
        max_per_tx numeric(78, 0),
        daily_ceiling numeric(78, 0),
        active boolean not null default true,
        created_at timestamptz not null default now(),
        deactivated_at timestamptz
      )`,
      // Claim check: the signed authorization travels to the workflow by key, never in its history.
      `create table settle_requests (
        settlement_key text primary key,
        account_id text not null,
        request jsonb not null,
        created_at timestamptz not null default now()
      )`,
      `create table settlements (
        id text primary key,
        settlement_key text not null unique,
        chain_id integer not null,
        token text not null,
        payer text not null,
        nonce text not null,
        account_id text not null,
        pay_to text not null,
        amount numeric(78, 0) not null,
        valid_before numeric(78, 0) not null,
        status text not null check (status in ('claimed', 'signed', 'broadcast', 'pending', 'settled', 'failed')),
        failure_cause text,
        usage_day date,
        reserved_amount numeric(78, 0) not null default 0,
        gas_wallet text,
        gas_nonce bigint,
        tx_hash text unique,
        raw_tx text,
        block_number bigint,
        gas_used numeric(78, 0),
        attempts integer not null default 0,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        completed_at timestamptz,
        unique (chain_id, token, payer, nonce),
        unique (gas_wallet, gas_nonce)
      )`,
      `create index settlements_account_created on settlements (account_id, created_at desc)`,
      `create table daily_usage (
        account_id text not null,
        day date not null,
        reserved numeric(78, 0) not null default 0 check (reserved >= 0),
        primary key (account_id, day)
      )`,
      `create table gas_wallets (
        address text not null,
        chain_id integer not null,
        next_nonce bigint not null,
        updated_at timestamptz not null default now(),
        primary key (address, chain_id)
      )`,
    ],
  },
  {
    // Every transaction signed for a settlement: the first (seq 0) and each fee bump, which
    // re-signs the same gas nonce with higher fees. Stored before it is sent; whichever is
    // mined becomes the settlement's tx_hash.
    name: '0002_settlement_transactions',
    sql: [
      `create table settlement_transactions (
        settlement_key text not null references settlements (settlement_key),
        seq integer not null check (seq >= 0),
        tx_hash text not null unique,
        raw_tx text not null,
        max_fee_per_gas numeric(78, 0),
        max_priority_fee_per_gas numeric(78, 0),
        created_at timestamptz not null default now(),
        primary key (settlement_key, seq)
      )`,
    ],
  },
  {
    // The outbox: a /settle handler claims and sends before its workflow start is acknowledged
    // (the claim check and the settlement row are the durable intent). workflow_started_at
    // records the acknowledgement; the sweeper starts the workflow of every claimed request
    // still without one. refused_cause makes a guardrail refusal (or a run that gave up before
    // signing) durable, so a run started later answers it instead of claiming afresh.
    name: '0003_settle_request_outbox',
    sql: [
      `alter table settle_requests add column workflow_started_at timestamptz, add column refused_cause text`,
      // Requests from before the outbox had their workflow started before anything else.
      `update settle_requests set workflow_started_at = created_at`,
      `create index settle_requests_unstarted on settle_requests (created_at) where workflow_started_at is null`,
    ],
  },
  {
    // Gas the gas wallet spent on an account's settlements that reverted on chain after passing
    // simulation, per day, and the gas its settlements in flight could still burn that way (each
    // one's gas limit × max fee, held from claim to outcome): their sum stays within
    // FACILITATOR_FAILED_GAS_DAILY_WEI, beyond which the account's /settle is 429.
    name: '0004_failed_gas',
    sql: [
      `alter table daily_usage add column failed_gas_wei numeric(78, 0) not null default 0,
         add column gas_at_risk_wei numeric(78, 0) not null default 0`,
      `alter table settlements add column gas_at_risk_wei numeric(78, 0) not null default 0`,
    ],
  },
  {
    // A settlement whose authorization someone else submitted is settled with that transaction,
    // and one transaction may use several payers' authorizations (a batching submitter), so the
    // settlements' tx_hash is no longer unique. The gas wallet's own transactions stay unique
    // in settlement_transactions.
    name: '0005_foreign_settlement_transactions',
    sql: [`alter table settlements drop constraint if exists settlements_tx_hash_key`],
  },
  {
    // A revert whose authorization is still unused keeps its settlement pending (anyone may
    // still submit the authorization until validBefore), and a watcher reads that revert again
    // and again: the revert whose gas was charged to the account's failed-gas budget is kept,
    // so each reverted transaction is charged once.
    name: '0006_charged_revert',
    // The sweeper finds pending settlements past their validBefore (their watcher gone) by this.
    sql: [
      `alter table settlements add column charged_revert_tx text`,
      `create index settlements_pending on settlements (updated_at) where status = 'pending'`,
    ],
  },
  {
    // The sweeper finds signed settlements whose run is gone (idle past any live run's bound) by this.
    name: '0007_settlements_in_flight',
    sql: [`create index settlements_in_flight on settlements (updated_at) where status in ('signed', 'broadcast')`],
  },
  {
    // A batch-settlement channel's refund is asked only by an account whose deposit into it was
    // settled here (facilitator/store/requests.ts, depositedBy): its deposits found by channel.
    name: '0008_batch_deposit_channels',
    sql: [
      `set local lock_timeout = '5s'`,
      `create index settle_requests_deposit_channel on settle_requests
         (lower(request->'action'->'voucher'->>'channelId'), account_id) where request->'action'->>'type' = 'deposit'`,
    ],
  },
  {
    // The failed-gas budget kept twice (docs/SETTLEMENT.md, "Failed-gas budget"): once for the
    // settlements a payer's signature or funds could make revert, once for the account's own
    // (batch-settlement claims and settles), which a payer's reverts must never stop.
    name: '0009_own_gas_budget',
    sql: [
      `alter table daily_usage add column own_failed_gas_wei numeric(78, 0) not null default 0,
         add column own_gas_at_risk_wei numeric(78, 0) not null default 0`,
      `alter table settlements add column own_gas boolean not null default false`,
    ],
  },
];

const LOCK_KEY = 402_402_001;

export async function migrateFacilitator(pool: pg.Pool): Promise<string[]> {
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('select pg_advisory_lock($1)', [LOCK_KEY]);
    await client.query(
      'create table if not exists facilitator_migrations (name text primary key, applied_at timestamptz not null default now())',
    );
    const done = new Set(
      (await client.query<{ name: string }>('select name from facilitator_migrations')).rows.map((r) => r.name),
    );
    for (const migration of facilitatorMigrations) {
      if (done.has(migration.name)) continue;
      await client.query('begin');
      try {
        for (const statement of migration.sql) await client.query(statement);
        await client.query('insert into facilitator_migrations (name) values ($1)', [migration.name]);
        await client.query('commit');
      } catch (err) {
        await client.query('rollback');
        throw err;
      }
      applied.push(migration.name);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    client.release();
  }
  return applied;
}

/** A process entry's migration at start: a missing or unreachable database ends it in one line. */
export async function migrateFacilitatorOrExit(processName: string, pool: pg.Pool, databaseUrl: string): Promise<void> {
  await migrateFacilitator(pool).catch((err: unknown) =>
    exitOnDatabaseProblem(processName, databaseProblem('FACILITATOR_DATABASE_URL', databaseUrl, err)),
  );
}
