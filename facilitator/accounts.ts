// Facilitator accounts: who may call /settle. A client certificate maps to exactly one account
// by the SHA-256 fingerprint of its DER; the account carries its guardrails (allowed
// (network, asset) kinds, per-transaction maximum, daily ceiling; null limits fall back to the
// deployment defaults). Operators manage them with `npm run facilitator -- accounts ...`.
import type pg from 'pg';
import { getAddress } from 'ethers';
import { LRUCache } from 'lru-cache';
import { v7 as uuidv7 } from 'uuid';
import { certFingerprint256 } from './fingerprint.ts';

export type AccountKind = { network: string; asset: string };

export type Account = {
  id: string;
  name: string;
  certFingerprint: string;
  allowedKinds: AccountKind[];
  maxPerTx: bigint | null;
  dailyCeiling: bigint | null;
  active: boolean;
  createdAt: Date;
  deactivatedAt: Date | null;
};

type AccountRow = {
  id: string;
  name: string;
  cert_fingerprint: string;
  allowed_kinds: AccountKind[];
  max_per_tx: string | null;
  daily_ceiling: string | null;
  active: boolean;
  created_at: Date;
  deactivated_at: Date | null;
};

function fromRow(row: AccountRow): Account {
  return {
    id: row.id,
    name: row.name,
    certFingerprint: row.cert_fingerprint,
    allowedKinds: row.allowed_kinds,
    maxPerTx: row.max_per_tx === null ? null : BigInt(row.max_per_tx),
    dailyCeiling: row.daily_ceiling === null ? null : BigInt(row.daily_ceiling),
    active: row.active,
    createdAt: row.created_at,
    deactivatedAt: row.deactivated_at,
  };
}

function normalizeKind(kind: AccountKind): AccountKind {
  return { network: kind.network, asset: getAddress(kind.asset) };
}

export async function addAccount(
  db: pg.Pool | pg.PoolClient,
  input: {
    name: string;
    certPem: string;
    allowedKinds: AccountKind[];
    maxPerTx?: bigint | null;
    dailyCeiling?: bigint | null;
  },
): Promise<Account> {
  const fingerprint = certFingerprint256(input.certPem);
  const { rows } = await db.query<AccountRow>(
    `insert into facilitator_accounts (id, name, cert_fingerprint, allowed_kinds, max_per_tx, daily_ceiling)
     values ($1, $2, $3, $4, $5, $6) returning *`,
    [
      `fac_${uuidv7()}`,
      input.name,
      fingerprint,
      JSON.stringify(input.allowedKinds.map(normalizeKind)),
      input.maxPerTx?.toString() ?? null,
      input.dailyCeiling?.toString() ?? null,
    ],
  );
  return fromRow(rows[0]);
}

export async function listAccounts(db: pg.Pool): Promise<Account[]> {
  const { rows } = await db.query<AccountRow>('select * from facilitator_accounts order by created_at, id');
  return rows.map(fromRow);
}

/** Deactivates by account id or certificate fingerprint; returns the account, or null when none matched. */
export async function deactivateAccount(db: pg.Pool, idOrFingerprint: string): Promise<Account | null> {
  const { rows } = await db.query<AccountRow>(
    `update facilitator_accounts set active = false, deactivated_at = coalesce(deactivated_at, now())
     where id = $1 or cert_fingerprint = lower($1) returning *`,
    [idOrFingerprint],
  );
  return rows[0] ? fromRow(rows[0]) : null;
}

export async function findAccountById(db: pg.Pool | pg.PoolClient, id: string): Promise<Account | null> {
  const { rows } = await db.query<AccountRow>('select * from facilitator_accounts where id = $1', [id]);
  return rows[0] ? fromRow(rows[0]) : null;
}

/**
 * Fingerprint → account lookups for the mutual-TLS listener, cached for `cacheMs` so the hot
 * path does not query per request; a deactivation takes effect within that time. A
 * certificate with no account is remembered too (one query per `cacheMs`, however often it
 * calls). Bounded at 10,000 certificates, far more than a facilitator has accounts, least
 * recently used out.
 */
export function createAccountLookup(db: pg.Pool, cacheMs: number): (fingerprint: string) => Promise<Account | null> {
  // lru-cache reads a ttl of 0 as "forever": FACILITATOR_ACCOUNT_CACHE_MS=0 means no cache.
  const cache = cacheMs > 0 ? new LRUCache<string, { account: Account | null }>({ max: 10_000, ttl: cacheMs }) : null;
  return async (fingerprint) => {
    const hit = cache?.get(fingerprint);
    if (hit) return hit.account;
    const { rows } = await db.query<AccountRow>('select * from facilitator_accounts where cert_fingerprint = $1', [
      fingerprint,
    ]);
    const account = rows[0] ? fromRow(rows[0]) : null;
    cache?.set(fingerprint, { account });
    return account;
  };
}
