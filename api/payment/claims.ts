// One payment buys one call. A verified payment is claimed in PostgreSQL by (network, asset,
// payer, nonce) before it is settled, and bound to its invocation in the same transaction
// that writes the invocation row. A payment already bound is refused; one claimed but never
// bound (a crash, or a failed settle) is resumed by a retry of the same payment for the same
// agent, which the facilitator dedupes, so it is never collected twice.
import type { EntityManager } from '@mikro-orm/postgresql';
import { v7 as uuidv7 } from 'uuid';
import { ApiError } from '../errors.ts';
import type { PaymentRecord } from '../proxy/call.ts';
import { PaymentClaimSchema, type PaymentClaimStatus } from './entity.ts';
import { InvocationSchema, type Invocation } from '../db/entities.ts';

export type ClaimKey = { network: string; asset: string; payer: string; nonce: string };

export type ClaimInput = ClaimKey & { tenantId: string; agentId: string; amount: string };

export type ClaimState = 'new' | 'resumed' | 'used';

export async function claimPayment(em: EntityManager, input: ClaimInput): Promise<ClaimState> {
  const now = new Date();
  const inserted = await em.getConnection().execute<{ id: string }[]>(
    `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, created_at, updated_at)
     values (?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?, ?)
     on conflict (network, asset, payer, nonce) do nothing
     returning id`,
    [`pay_${uuidv7()}`, input.tenantId, input.agentId, input.network, input.asset, input.payer, input.nonce, input.amount, now, now],
  );
  if (inserted.length > 0) return 'new';
  const existing = await em.fork().findOne(PaymentClaimSchema, {
    network: input.network,
    asset: input.asset,
    payer: input.payer,
    nonce: input.nonce,
  });
  if (!existing || existing.invocationId) return 'used';
  // Only the same call may resume an unbound claim: same tenant, same agent, same price.
  if (existing.tenantId !== input.tenantId || existing.agentId !== input.agentId || existing.amount !== input.amount) return 'used';
  return 'resumed';
}

export async function recordSettlement(em: EntityManager, key: ClaimKey, status: PaymentClaimStatus, transaction: string | null): Promise<void> {
  await em.fork().nativeUpdate(PaymentClaimSchema, { ...key, invocationId: null }, { status, transaction, updatedAt: new Date() });
}

/**
 * Flushes the invocation row (and whatever else `em` holds) and binds the payment to it, in one
 * transaction: either both are written or neither. A payment bound meanwhile by a concurrent
 * request with the same X-PAYMENT is refused with 402, and nothing of this call is written.
 */
export async function flushBindingPayment(em: EntityManager, payment: PaymentRecord | null, invocationId: string): Promise<void> {
  if (!payment) return em.flush();
  await em.begin();
  try {
    await em.flush();
    const bound = await em.nativeUpdate(
      PaymentClaimSchema,
      { network: payment.network, asset: payment.asset, payer: payment.payer, nonce: payment.nonce, invocationId: null },
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
export async function insertBindingPayment(em: EntityManager, row: Invocation, payment: PaymentRecord): Promise<void> {
  await em.fork().transactional(async (tx) => {
    await tx.insert(InvocationSchema, row);
    const bound = await tx.nativeUpdate(
      PaymentClaimSchema,
      { network: payment.network, asset: payment.asset, payer: payment.payer, nonce: payment.nonce, invocationId: null },
      { invocationId: row.id, updatedAt: new Date() },
    );
    if (bound !== 1) throw new ApiError(402, 'payment already used');
  });
}
