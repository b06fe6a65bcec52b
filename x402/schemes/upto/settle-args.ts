// The call that charges a verified `upto` payment: the upto proxy's `settle(permit, amount, owner,
// witness, signature)`, or `settleWithPermit(permit2612, ...)` when the payer sent an EIP-2612
// permit instead of approving Permit2 (the ABI the x402 EVM reference facilitator calls). The
// facilitator named in the witness sends it; `amount` is the actual charge, 0 < amount <= permitted.
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
