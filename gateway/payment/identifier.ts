// The x402 payment-identifier extension (x402 specs/extensions/payment_identifier.md): a payer
// that sends an `id` with its v2 (or MCP) payment and retries with the same `id` gets the first
// attempt's outcome instead of a second call or charge. The identifier is kept with the payment's
// binding, scoped to the tenant, the agent and the payer, for X402_SETTLED_RESUME_HOURS (24 h).
// - same id, same authorization, already bound to a call: that call's answer again, `202
//   {invocation_id}` with X-Gateway-Invocation-ID and the receipt header naming the same
//   transaction (nothing is verified against the chain, settled or forwarded again);
// - same id, same authorization, not bound (still settling, or released): the payment resumes as
//   without an identifier;
// - same id, another authorization: `409`, before anything is recorded or settled.
// A channel payment (batch-settlement) is the same authorization when it is the same voucher
// (answerKnownChannelIdentifier): its binding is named by the voucher and the call's lease.
// (refusals.ts names these outcomes; the door answers them.)
import type { EntityManager } from '@mikro-orm/postgresql';
import { paymentByIdentifier } from './binding.ts';
import type { PaymentConfig } from './config.ts';
import { paymentResponseValue, type Dialect } from './dialect.ts';
import { PaymentAlreadyAnswered, PaymentIdentifierConflict, PaymentStillSettling } from './refusals.ts';

export type IdentifiedPayment = {
  tenantId: string;
  agentId: string;
  payer: string;
  nonce: string;
  paymentId: string;
  dialect: Dialect;
};

/**
 * Throws the first attempt's answer (PaymentAlreadyAnswered) or PaymentIdentifierConflict when
 * the identifier is known; returns when it is new, or names this very authorization still
 * unbound (the payment then resumes).
 */
export async function answerKnownIdentifier(
  em: EntityManager,
  config: PaymentConfig,
  offered: IdentifiedPayment,
): Promise<void> {
  const known = await paymentByIdentifier(em, offered, config.settledResumeMs);
  if (!known) return;
  if (known.nonce !== offered.nonce) throw new PaymentIdentifierConflict();
  if (!known.invocationId) return;
  const receipt = known.transaction
    ? {
        dialect: offered.dialect,
        value: paymentResponseValue(config, offered.dialect, {
          transaction: known.transaction,
          network: config.network,
          payer: offered.payer,
        }),
      }
    : null;
  throw new PaymentAlreadyAnswered(known.invocationId, receipt);
}

/** Whether this tenant's agent holds `paymentId` for this authorization, bound to a call, within the window. */
export async function identifiesBoundPayment(
  em: EntityManager,
  config: PaymentConfig,
  offered: Omit<IdentifiedPayment, 'dialect'>,
): Promise<boolean> {
  const known = await paymentByIdentifier(em, offered, config.settledResumeMs);
  return !!known && known.nonce === offered.nonce && !!known.invocationId;
}

// The call holding its channel under the voucher's binding is still running (admitted, not yet
// bound or committed); a binding never bound otherwise is let go of its identifier, as is one
// whose lease lapsed (its process died between its admission and its accept).
const HOLDING = `select exists (select 1 from channels c
    where c.id = lower(b.signed_payment->'payment'->'payload'->'voucher'->>'channelId')
      and c.busy_invocation = b.signed_payment->>'channelLease' and c.busy_until > now()) as holding
  from payment_claims b
 where b.tenant_id = ? and b.agent_id = ? and b.payer = ? and b.payment_id = ?`;

const FORGET = `update payment_claims set payment_id = null
  where tenant_id = ? and agent_id = ? and payer = ? and payment_id = ? and invocation_id is null`;

/**
 * A channel payment's identifier (channels/admission.ts names its binding `<voucher nonce>-<lease>`):
 * the same voucher under a known identifier gets the first call's answer (PaymentAlreadyAnswered,
 * never a second charge), or PaymentStillSettling while that call is still being admitted;
 * another voucher under it is PaymentIdentifierConflict. A binding whose call never ran (refused
 * after admission, released) gives its identifier up: this attempt is the call.
 */
export async function answerKnownChannelIdentifier(
  em: EntityManager,
  config: PaymentConfig,
  offered: IdentifiedPayment,
): Promise<void> {
  const known = await paymentByIdentifier(em, offered, config.settledResumeMs);
  if (!known) return;
  if (!known.nonce.startsWith(`${offered.nonce}-`)) throw new PaymentIdentifierConflict();
  if (known.invocationId) throw new PaymentAlreadyAnswered(known.invocationId, null);
  const scope = [offered.tenantId, offered.agentId, offered.payer, offered.paymentId];
  const [row] = await em.getConnection().execute<Array<{ holding: boolean }>>(HOLDING, scope);
  if (row?.holding) throw new PaymentStillSettling();
  await em.getConnection().execute(FORGET, scope);
}
