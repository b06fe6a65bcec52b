// One payment buys one call. A verified payment is claimed in PostgreSQL by (network, asset,
// payer, nonce) before it is settled, and bound to its invocation in the same transaction
// that writes the invocation row. A payment already bound is refused; one claimed but never
// bound (a crash, or a failed settle) is resumed by a retry of the same payment for the same
// agent, which the facilitator dedupes, so it is never collected twice. A payment bound to a
// call whose workflow could not be started is released with the call's row (one statement),
// so the same X-PAYMENT retried later buys the call it paid for; a claim already settled is
// then bound again without settling (its transaction is reused).
import type { EntityManager } from '@mikro-orm/postgresql';
import { v7 as uuidv7 } from 'uuid';
import { ApiError } from '../../lib/http-error.ts';
import { PaymentClaimSchema, type PaymentClaimStatus } from './entity.ts';
import { InvocationSchema, type Invocation } from '../db/entities.ts';

export type ClaimKey = { network: string; asset: string; payer: string; nonce: string };

export type ClaimInput = ClaimKey & { tenantId: string; agentId: string; amount: string };

/** `conflict`: another claim of this tenant, agent and payer holds the same payment identifier. */
type ClaimState = 'new' | 'resumed' | 'used' | 'conflict';

/**
 * The claim's state; `settledTransaction` when a resumed claim was already settled (do not
 * settle again); `outcomeUnknown` when a resumed claim was sent to settle and its answer never
 * came (the transfer may have landed).
 */
export type Claim = { state: ClaimState; settledTransaction: string | null; outcomeUnknown?: boolean };

/** The unique index that keeps one payment identifier to one claim per tenant, agent and payer. */
const PAYMENT_ID_INDEX = 'payment_claims_payment_id';

export async function claimPayment(
  em: EntityManager,
  input: ClaimInput & { paymentId?: string | null },
): Promise<Claim> {
  const now = new Date();
  let inserted: { id: string }[];
  try {
    inserted = await em.getConnection().execute<{ id: string }[]>(
      `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, payment_id, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?, ?, ?)
       on conflict (network, asset, payer, nonce) do nothing
       returning id`,
      [
        `pay_${uuidv7()}`,
        input.tenantId,
        input.agentId,
        input.network,
        input.asset,
        input.payer,
        input.nonce,
        input.amount,
        input.paymentId ?? null,
        now,
        now,
      ],
    );
  } catch (err) {
    // A concurrent request claimed another authorization under the same identifier first.
    if ((err as { constraint?: string }).constraint === PAYMENT_ID_INDEX)
      return { state: 'conflict', settledTransaction: null };
    throw err;
  }
  if (inserted.length > 0) return { state: 'new', settledTransaction: null };
  const existing = await em.fork().findOne(PaymentClaimSchema, {
    network: input.network,
    asset: input.asset,
    payer: input.payer,
    nonce: input.nonce,
  });
  const used = { state: 'used', settledTransaction: null } as const;
  if (!existing || existing.invocationId) return used;
  // Only the same call may resume an unbound claim: same tenant, same agent, same price.
  if (existing.tenantId !== input.tenantId || existing.agentId !== input.agentId || existing.amount !== input.amount)
    return used;
  return {
    state: 'resumed',
    settledTransaction: existing.status === 'settled' ? (existing.transaction ?? null) : null,
    outcomeUnknown: existing.status === 'claimed',
  };
}

/**
 * Whether this very call (same tenant, agent and price) claimed the payment within `withinMs`,
 * no call holds it yet, and it is settled or its outcome is unknown (the process died between
 * the settle and its record): the money may have moved, so the same header resumes the claim
 * whatever its validBefore says now (the facilitator, asked again, dedupes by nonce).
 */
export async function resumableUnboundClaim(em: EntityManager, input: ClaimInput, withinMs: number): Promise<boolean> {
  const existing = await em.fork().findOne(PaymentClaimSchema, {
    network: input.network,
    asset: input.asset,
    payer: input.payer,
    nonce: input.nonce,
  });
  if (!existing || existing.invocationId || (existing.status !== 'settled' && existing.status !== 'claimed'))
    return false;
  if (existing.tenantId !== input.tenantId || existing.agentId !== input.agentId || existing.amount !== input.amount)
    return false;
  return Date.now() - existing.updatedAt.getTime() <= withinMs;
}

/** The claim a payment identifier names, as the payment-identifier extension's retries need it. */
export type IdentifiedClaim = { nonce: string; invocationId: string | null; transaction: string | null };

/**
 * The claim this tenant's agent holds under `paymentId` for this payer, claimed within
 * `withinMs`; null when there is none. An identifier older than the window is forgotten first
 * (cleared from its claim), so it names nothing and may be used again.
 */
export async function identifiedClaim(
  em: EntityManager,
  scope: { tenantId: string; agentId: string; payer: string; paymentId: string },
  withinMs: number,
): Promise<IdentifiedClaim | null> {
  const since = new Date(Date.now() - withinMs);
  const key = [scope.tenantId, scope.agentId, scope.payer, scope.paymentId];
  const conn = em.getConnection();
  await conn.execute(
    `update payment_claims set payment_id = null
      where tenant_id = ? and agent_id = ? and payer = ? and payment_id = ? and created_at < ?`,
    [...key, since],
  );
  const rows = await conn.execute<{ nonce: string; invocation_id: string | null; transaction: string | null }[]>(
    `select nonce, invocation_id, transaction from payment_claims
      where tenant_id = ? and agent_id = ? and payer = ? and payment_id = ?`,
    key,
  );
  const row = rows[0];
  return row ? { nonce: row.nonce, invocationId: row.invocation_id, transaction: row.transaction } : null;
}

export async function recordSettlement(
  em: EntityManager,
  key: ClaimKey,
  status: PaymentClaimStatus,
  transaction: string | null,
): Promise<void> {
  await em
    .fork()
    .nativeUpdate(PaymentClaimSchema, { ...key, invocationId: null }, { status, transaction, updatedAt: new Date() });
}

/**
 * Flushes the invocation row (and whatever else `em` holds) and binds the payment to it, in one
 * transaction: either both are written or neither. A payment bound meanwhile by a concurrent
 * request with the same X-PAYMENT is refused with 402, and nothing of this call is written.
 */
export async function flushBindingPayment(
  em: EntityManager,
  payment: ClaimKey | null,
  invocationId: string,
): Promise<void> {
  if (!payment) return em.flush();
  await em.begin();
  try {
    await em.flush();
    const bound = await em.nativeUpdate(
      PaymentClaimSchema,
      {
        network: payment.network,
        asset: payment.asset,
        payer: payment.payer,
        nonce: payment.nonce,
        invocationId: null,
      },
      { invocationId, updatedAt: new Date() },
    );
    if (bound !== 1) throw new ApiError(402, 'payment already used');
    await em.commit();
  } catch (err) {
    await em.rollback();
    throw err;
  }
}

/**
 * The streaming path's equivalent: inserts the invocation row and binds the payment in one
 * transaction, before anything is forwarded (the streaming route otherwise overlaps its
 * insert with connecting upstream; a paid call must not reach the upstream unbound).
 */
export async function insertBindingPayment(em: EntityManager, row: Invocation, payment: ClaimKey): Promise<void> {
  await em.fork().transactional(async (tx) => {
    await tx.insert(InvocationSchema, row);
    const bound = await tx.nativeUpdate(
      PaymentClaimSchema,
      {
        network: payment.network,
        asset: payment.asset,
        payer: payment.payer,
        nonce: payment.nonce,
        invocationId: null,
      },
      { invocationId: row.id, updatedAt: new Date() },
    );
    if (bound !== 1) throw new ApiError(402, 'payment already used');
  });
}

/**
 * One statement that runs `rowsStatement` (a data-modifying statement `returning id, attempts`
 * over invocations it closes) and releases the payments bound to the rows whose call never
 * reached its upstream: `attempts = 0`, since a call counts its attempt in the statement that
 * lets it be forwarded (the transactional claim, the streaming row's forwarding mark), so a
 * released payment was never used. The same payment header then buys the call it paid for
 * (a settled claim is bound again without settling: claimPayment). Answers what the rows
 * statement returns and whether each payment was released.
 */
export function releasingPayments(rowsStatement: string, before = ''): string {
  // `before`: CTEs the rows statement reads (data-modifying ones must be at the top level).
  return `with ${before ? `${before}, ` : ''}touched as (${rowsStatement}),
     released as (update payment_claims set invocation_id = null, updated_at = now()
                   where invocation_id in (select id from touched where attempts = 0) returning invocation_id)
     select touched.*, exists (select 1 from released r where r.invocation_id = touched.id) as released from touched`;
}
