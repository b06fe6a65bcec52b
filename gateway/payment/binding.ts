// One payment buys one call: the payment binding. A verified payment is recorded in PostgreSQL
// by (network, asset, payer, nonce) before it is settled, and bound to its invocation in the
// same transaction that writes the invocation row. A payment already bound is refused; one
// recorded but never bound (a crash, or a failed settle) is resumed by a retry of the same
// payment for the same call, which the facilitator dedupes, so it is never collected twice. A
// payment bound to a call whose workflow could not be started is released with the call's row
// (one statement), so the same payment header retried later buys the call it paid for; a
// payment already settled is then bound again without settling (its transaction is reused).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { GatewayDb } from '../db/orm.ts';
import { PaymentBindingSchema, type PaymentBindingStatus, type KeptPayment } from './entity.ts';
import type { Invocation } from '../db/entities.ts';
import { newId } from '../../lib/ids.ts';
import { invocationColumns, type InvocationField } from '../invocations/columns.ts';

/** What identifies one payment: its authorization's nonce under a network, asset and payer. */
export type PaymentKey = { network: string; asset: string; payer: string; nonce: string };

/** The call a payment is offered for: its key, and the tenant, agent and price it buys. */
export type PaymentForCall = PaymentKey & { tenantId: string; agentId: string; amount: string };

/** Thrown when the payment is bound to another call already: nothing of this call is written. */
export class PaymentAlreadyBound extends Error {
  constructor() {
    super('payment already used');
    this.name = 'PaymentAlreadyBound';
  }
}

/**
 * `new`: recorded now; `resumed`: recorded earlier for this same call and not bound yet;
 * `used`: bound to a call, or recorded for another call; `conflict`: another payment of this
 * tenant, agent and payer holds the same payment identifier.
 */
type RecordingState = 'new' | 'resumed' | 'used' | 'conflict';

/**
 * The recording's state; `settledTransaction` when a resumed payment was already settled (do
 * not settle again); `outcomeUnknown` when a resumed payment was sent to settle and its answer
 * never came (the transfer may have landed).
 */
export type PaymentRecording = { state: RecordingState; settledTransaction: string | null; outcomeUnknown?: boolean };

/** The unique index that keeps one payment identifier to one payment per tenant, agent and payer. */
const PAYMENT_ID_INDEX = 'payment_claims_payment_id';

type StoredPayment = { tenantId: string; agentId: string; amount: string; invocationId?: string | null };

/** The stored payment of this key, bound or not; null when none. */
async function findPayment(em: EntityManager, key: PaymentKey) {
  return em.fork().findOne(PaymentBindingSchema, {
    network: key.network,
    asset: key.asset,
    payer: key.payer,
    nonce: key.nonce,
  });
}

/** Whether the payment recorded under the input's identifier (tenant, agent, payer) is the input's payment. */
async function holdsIdentifier(em: EntityManager, input: PaymentForCall & { paymentId?: string | null }) {
  const [holder] = await em
    .getConnection()
    .execute<Array<{ network: string; asset: string; nonce: string }>>(
      'select network, asset, nonce from payment_claims where tenant_id = ? and agent_id = ? and payer = ? and payment_id = ?',
      [input.tenantId, input.agentId, input.payer, input.paymentId ?? null],
    );
  return !!holder && holder.network === input.network && holder.asset === input.asset && holder.nonce === input.nonce;
}

/** Only the same call may resume an unbound payment: same tenant, same agent, same price, not bound. */
function resumableBy(stored: StoredPayment, call: PaymentForCall): boolean {
  return (
    !stored.invocationId &&
    stored.tenantId === call.tenantId &&
    stored.agentId === call.agentId &&
    stored.amount === call.amount
  );
}

/** Records the payment for this call before it is settled, or says why an earlier record stands. */
export async function recordPayment(
  em: EntityManager,
  input: PaymentForCall & { paymentId?: string | null; signedPayment?: KeptPayment | null },
): Promise<PaymentRecording> {
  const now = new Date();
  let inserted: { id: string }[];
  try {
    inserted = await em.getConnection().execute<{ id: string }[]>(
      `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, payment_id, signed_payment, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?, ?::jsonb, ?, ?)
       on conflict (network, asset, payer, nonce) do nothing
       returning id`,
      [
        newId('pay'),
        input.tenantId,
        input.agentId,
        input.network,
        input.asset,
        input.payer,
        input.nonce,
        input.amount,
        input.paymentId ?? null,
        input.signedPayment ? JSON.stringify(input.signedPayment) : null,
        now,
        now,
      ],
    );
  } catch (err) {
    if ((err as { constraint?: string }).constraint !== PAYMENT_ID_INDEX) throw err;
    // A concurrent request recorded a payment under the same identifier first: another payment
    // (409), or this very one (two requests inserting the same payment at once, where PostgreSQL
    // may report the identifier's index rather than the payment's own, the ON CONFLICT target).
    if (!(await holdsIdentifier(em, input))) return { state: 'conflict', settledTransaction: null };
    inserted = [];
  }
  if (inserted.length > 0) return { state: 'new', settledTransaction: null };
  const existing = await findPayment(em, input);
  if (!existing || !resumableBy(existing, input)) return { state: 'used', settledTransaction: null };
  // A payment charged after its call, resumed with a new signature of the same nonce (another
  // deadline or permit): the one just verified is the one kept for its charge.
  if (input.signedPayment)
    await em
      .fork()
      .nativeUpdate(
        PaymentBindingSchema,
        { id: existing.id, invocationId: null },
        { signedPayment: input.signedPayment, updatedAt: now },
      );
  return {
    state: 'resumed',
    settledTransaction: existing.status === 'settled' ? (existing.transaction ?? null) : null,
    outcomeUnknown: existing.status === 'claimed',
  };
}

/**
 * Whether this very call (same tenant, agent and price) recorded the payment within `withinMs`,
 * no call holds it yet, and it is settled or its outcome is unknown (the process died between
 * the settle and its record): the money may have moved, so the same header resumes the payment
 * whatever its validBefore says now (the facilitator, asked again, dedupes by nonce).
 */
export async function resumableUnboundPayment(
  em: EntityManager,
  input: PaymentForCall,
  withinMs: number,
): Promise<boolean> {
  const existing = await findPayment(em, input);
  if (!existing || (existing.status !== 'settled' && existing.status !== 'claimed')) return false;
  return resumableBy(existing, input) && Date.now() - existing.updatedAt.getTime() <= withinMs;
}

/** The payment a payment identifier names, as the payment-identifier extension's retries need it. */
export type IdentifiedPayment = { nonce: string; invocationId: string | null; transaction: string | null };

/**
 * The payment this tenant's agent holds under `paymentId` for this payer, recorded within
 * `withinMs`; null when there is none. An identifier older than the window is forgotten first
 * (cleared from its payment), so it names nothing and may be used again.
 */
export async function paymentByIdentifier(
  em: EntityManager,
  scope: { tenantId: string; agentId: string; payer: string; paymentId: string },
  withinMs: number,
): Promise<IdentifiedPayment | null> {
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

/** The settle's outcome, on the payment while it is unbound. */
export async function recordSettlement(
  em: EntityManager,
  key: PaymentKey,
  status: PaymentBindingStatus,
  transaction: string | null,
): Promise<void> {
  await em
    .fork()
    .nativeUpdate(PaymentBindingSchema, { ...key, invocationId: null }, { status, transaction, updatedAt: new Date() });
}

/** Binds the unbound payment to `invocationId` inside the caller's transaction; PaymentAlreadyBound otherwise. */
async function bind(em: EntityManager, payment: PaymentKey, invocationId: string): Promise<void> {
  const { network, asset, payer, nonce } = payment;
  const bound = await em.nativeUpdate(
    PaymentBindingSchema,
    { network, asset, payer, nonce, invocationId: null },
    { invocationId, updatedAt: new Date() },
  );
  if (bound !== 1) throw new PaymentAlreadyBound();
}

/**
 * Flushes the invocation row (and whatever else `em` holds) and binds the payment to it, in one
 * transaction: either both are written or neither. A payment bound meanwhile by a concurrent
 * request with the same payment header is refused (PaymentAlreadyBound), and nothing of this
 * call is written.
 */
export async function flushBindingPayment(
  em: EntityManager,
  payment: PaymentKey | null,
  invocationId: string,
  /** Also in the transaction, after the binding: a step that may still refuse the call (throws). */
  also?: (em: EntityManager) => Promise<void>,
): Promise<void> {
  if (!payment) return em.flush();
  await em.begin();
  try {
    await em.flush();
    await bind(em, payment, invocationId);
    await also?.(em);
    await em.commit();
  } catch (err) {
    await em.rollback();
    throw err;
  }
}

/**
 * The streaming path's equivalent: inserts the invocation row and binds the payment in one
 * statement, before anything is forwarded (the streaming route otherwise overlaps its insert
 * with connecting upstream; a paid call must not reach the upstream unbound). One round trip
 * instead of the ORM's transaction of four (begin, insert, update, commit), on every paid
 * stream's latency path: the payment's row is locked first, so of two calls binding it at once
 * the second finds it bound and inserts nothing.
 */
export async function insertBindingPayment(db: GatewayDb, row: Invocation, payment: PaymentKey): Promise<void> {
  // The row's set fields, as the ORM's insert wrote them (an absent one keeps its column's default).
  const fields = (Object.keys(row) as InvocationField[]).filter((f) => row[f as keyof Invocation] !== undefined);
  const columns = invocationColumns(fields);
  const [written] = await db.em.getConnection().execute<Array<{ bound: number }>>(
    `with claim as (
       select id from payment_claims
        where network = ? and asset = ? and payer = ? and nonce = ? and invocation_id is null
        for update),
     inserted as (
       insert into invocations (${columns.names.join(', ')})
       select ${columns.placeholders.join(', ')} where exists (select 1 from claim)
       returning id),
     bound as (
       update payment_claims p set invocation_id = i.id, updated_at = now()
         from claim c, inserted i where p.id = c.id
       returning p.id)
     select count(*)::int as bound from bound`,
    [payment.network, payment.asset, payment.payer, payment.nonce, ...columns.values(row)],
  );
  if (written?.bound !== 1) throw new PaymentAlreadyBound();
}

/**
 * The statement that writes a paid stream's row (`rowInsert`, the recorder's: owned and counted
 * as forwarded) and its payment's binding, bound to it, in one commit: a voucher admitted on a
 * channel this process holds (channels/owners.ts), whose call is forwarded as this is written and
 * answered only once it has committed (api/invoke/stream-record.ts). The binding's name holds the
 * call's own token, so it is new; a failure writes neither. Fenced by the hold: written only while
 * `lease` is the channel's running lease, so a holder that lost it (paused past its lease, its
 * renewals failing) writes nothing (returns no row) and answers nothing, whatever it believed.
 */
export function paidRowStatement(
  rowInsert: string,
  invocationId: string,
  payment: PaymentForCall & { signedPayment: KeptPayment },
  lease: { channelId: string; token: string },
): { name: string; sql: string; params: unknown[] } {
  return {
    name: 'gw_paid_stream_row',
    sql: `with binding as (
       insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, signed_payment,
                                   invocation_id, created_at, updated_at)
       select $2, $3, $4, $5, $6, $7, $8, $9, 'claimed', $10::jsonb, $11, now(), now()
        where exists (select 1 from channels where id = $12 and busy_invocation = $13 and busy_until > now())
       returning id)
     ${rowInsert} where exists (select 1 from binding) returning id`,
    params: [
      newId('pay'),
      payment.tenantId,
      payment.agentId,
      payment.network,
      payment.asset,
      payment.payer,
      payment.nonce,
      payment.amount,
      JSON.stringify(payment.signedPayment),
      invocationId,
      lease.channelId,
      lease.token,
    ],
  };
}

/**
 * A released payment's kept signature (a payment charged after its call) goes with its binding:
 * the same payment header, resumed, is verified again and its signature kept anew (recordPayment).
 *
 * One statement that runs `rowsStatement` (a data-modifying statement `returning id, attempts`
 * over invocations it closes) and releases the payments bound to the rows whose call never
 * reached its upstream: `attempts = 0`, since a call counts its attempt in the statement that
 * lets it be forwarded (the transactional attempt lease, the streaming row's forwarding mark),
 * so a released payment was never used. The same payment header then buys the call it paid for
 * (a settled payment is bound again without settling: recordPayment). Answers what the rows
 * statement returns and whether each payment was released.
 *
 * A released channel payment (batch-settlement) lets its channel go in the same statement: the
 * lease its binding names (`signed_payment.channelLease`) is dropped while that call still holds
 * it, so the payer's next call is admitted at once instead of after the lease lapses.
 */
export function releasingPayments(rowsStatement: string, before = '', everyLease = false): string {
  // `before`: CTEs the rows statement reads (data-modifying ones must be at the top level).
  // `leases` reads the bindings as they were before this statement (a CTE's snapshot), so it still
  // sees the signed payments that `released` clears. `everyLease`: the channels of forwarded rows
  // are let go too (their payments stay bound): the lost-stream sweep's, whose rows' processes
  // are gone, with any channel they held between calls.
  return `with ${before ? `${before}, ` : ''}touched as (${rowsStatement}),
     leases as (select signed_payment->>'channelLease' as lease,
                       lower(signed_payment->'payment'->'payload'->'voucher'->>'channelId') as channel
                  from payment_claims
                 where invocation_id in (select id from touched where ${everyLease ? 'true' : 'attempts = 0'})
                   and signed_payment->>'channelLease' is not null),
     released as (update payment_claims set invocation_id = null, signed_payment = null, updated_at = now()
                   where invocation_id in (select id from touched where attempts = 0) returning invocation_id),
     unleased as (update channels c set busy_until = null, busy_invocation = null, updated_at = now()
                    from leases l where c.id = l.channel and c.busy_invocation = l.lease)
     select touched.*, exists (select 1 from released r where r.invocation_id = touched.id) as released from touched`;
}

/**
 * Lets go of the signed payments that bindings never bound to a call still hold (the call was
 * refused, or its process died, between the payment's record and its binding), at most `limit`,
 * those last written before the cutoff first; answers how many. Such a signature is a usable
 * authorization of the payer's money with no call to charge: it is not kept past its need. A
 * retry of the same payment for the same call brings its signature anew (recordPayment), and a
 * binding bound meanwhile is left alone (the row lock, then its `invocation_id is null` again).
 * Reads the partial index payment_claims_unbound_signed.
 */
export async function clearUnboundSignedPayments(
  db: GatewayDb,
  { olderThanMs, limit }: { olderThanMs: number; limit: number },
): Promise<number> {
  const rows = await db.em.getConnection().execute<Array<{ cleared: number }>>(
    `with doomed as (
       select id from payment_claims
        where invocation_id is null and signed_payment is not null and updated_at < to_timestamp(? / 1000.0)
        order by updated_at limit ? for update skip locked
     ), cleared as (
       update payment_claims set signed_payment = null
        where id in (select id from doomed) and invocation_id is null returning 1
     ) select count(*)::int as cleared from cleared`,
    [olderThanMs, limit],
  );
  return Number(rows[0]?.cleared ?? 0);
}
