// The call that charges a verified `upto` payment: the upto proxy's `settle(permit, amount, owner,
// witness, signature)`, or `settleWithPermit(permit2612, ...)` when the payer sent an EIP-2612
// permit instead of approving Permit2 (the ABI the x402 EVM reference facilitator calls). The
// facilitator named in the witness sends it; `amount` is the actual charge, 0 < amount <= permitted.
import { Signature, getAddress } from 'ethers';
import { permit2Nonce, sponsoredPermitOf, type UptoPayment } from './schemas.ts';
import type { VerifiedUptoPayment } from './verify.ts';

export type UptoSettleCall = { method: 'settle' | 'settleWithPermit'; args: unknown[] };

/** The proxy method and its arguments (tuples as objects, as ethers encodes them) for charging `amount`. */
export function uptoSettleCall(payment: VerifiedUptoPayment, amount: bigint): UptoSettleCall {
  const args = [
    { permitted: { token: payment.token, amount: payment.amount }, nonce: payment.nonce, deadline: payment.deadline },
    amount,
    payment.payer,
    { to: payment.to, facilitator: payment.facilitator, validAfter: payment.validAfter },
    payment.signature,
  ];
  if (!payment.permit2612) return { method: 'settle', args };
  const { value, deadline, r, s, v } = payment.permit2612;
  return { method: 'settleWithPermit', args: [{ value, deadline, r, s, v }, ...args] };
}

/**
 * The same call for a payment verified before (by verifyUptoPayment, at an earlier step): its
 * fields read as they stand, with no check repeated. Throws on a payment that could never have
 * passed verification (a bad address or nonce, an unreadable permit).
 */
export function uptoSettleCallOf(payment: UptoPayment, amount: bigint): UptoSettleCall {
  const a = payment.payload.permit2Authorization;
  const nonce = permit2Nonce(a.nonce);
  if (nonce === null) throw new Error('upto payment with an invalid nonce');
  const sponsored = sponsoredPermitOf(payment);
  if (sponsored.kind === 'invalid') throw new Error('upto payment with an unreadable permit');
  let permit2612: VerifiedUptoPayment['permit2612'] = null;
  if (sponsored.kind === 'permit') {
    const permit = sponsored.info;
    const { v, r, s } = Signature.from(permit.signature);
    permit2612 = { value: BigInt(permit.amount), deadline: BigInt(permit.deadline), v, r, s };
  }
  return uptoSettleCall(
    {
      token: getAddress(a.permitted.token.toLowerCase()),
      amount: BigInt(a.permitted.amount),
      spender: getAddress(a.spender.toLowerCase()),
      nonce,
      deadline: BigInt(a.deadline),
      to: getAddress(a.witness.to.toLowerCase()),
      facilitator: getAddress(a.witness.facilitator.toLowerCase()),
      validAfter: BigInt(a.witness.validAfter),
      payer: getAddress(a.from.toLowerCase()),
      signature: payment.payload.signature,
      permit2612,
    },
    amount,
  );
}
