// A cooperative refund, once. The refund a payer's payload asks for is recorded before it is
// sent (a payment binding, payment_claims, never bound to a call), with the refund nonce the
// gateway completed it with. The same payload again (a client's retry after a lost answer, a
// replay by whoever holds it) is sent again with that same nonce, which the facilitator answers
// as the same settlement (it keys a refund by its channel and nonce): the first refund's answer,
// nothing refunded twice. Only a refund whose nonce the chain has used is sent so at once; one
// not done (refused, or its outcome unknown) is checked again like a new one, under the channel's
// lease and against its charged total (channels/admission.ts), so a payload kept from before
// later calls never refunds what they were charged. The same payload is the same refund: the
// payer's voucher ceiling (what it was charged) and amount; a second refund of the same amount
// with no call between is answered as the first (a call, or another amount, makes it another).
import type { EntityManager } from '@mikro-orm/postgresql';
import { recordPayment, type PaymentForCall } from '../binding.ts';
import type { SignedPayment } from '../entity.ts';

const EARLIER = `select tenant_id, signed_payment->>'refundNonce' as refund_nonce from payment_claims
  where network = ? and asset = ? and payer = ? and nonce = ?`;

/** The refund's own nonce: its channel, its voucher ceiling and its amount ('all': the whole unclaimed escrow). */
export function refundPaymentNonce(voucherNonce: string, amount: string | undefined): string {
  return `${voucherNonce}-${amount ?? 'all'}`;
}

/** The nonce a refund recorded earlier was sent with; 'foreign' when another tenant recorded it. */
export async function earlierRefundNonce(em: EntityManager, key: PaymentForCall): Promise<bigint | 'foreign' | null> {
  const [row] = await em
    .getConnection()
    .execute<Array<{ tenant_id: string; refund_nonce: string | null }>>(EARLIER, [
      key.network,
      key.asset,
      key.payer,
      key.nonce,
    ]);
  if (!row) return null;
  if (row.tenant_id !== key.tenantId) return 'foreign';
  return row.refund_nonce === null ? null : BigInt(row.refund_nonce);
}

/**
 * Records the refund with the nonce it is about to be sent with; answers the nonce to send it
 * with (a concurrent same refund recorded first: its nonce), or 'foreign'.
 */
export async function recordRefund(
  em: EntityManager,
  key: PaymentForCall & { paymentId: string | null },
  signed: SignedPayment,
  refundNonce: bigint,
): Promise<bigint | 'foreign'> {
  const recording = await recordPayment(em, {
    ...key,
    signedPayment: { ...signed, refundNonce: String(refundNonce) },
  });
  if (recording.state === 'new') return refundNonce;
  // Recorded meanwhile (the caller looked it up before its channel's lease): that one's nonce.
  return (await earlierRefundNonce(em, key)) ?? refundNonce;
}
