// The `exact` scheme at the gateway: the challenge entry of a price (the amount to pay exactly),
// and the verification of an EIP-3009 authorization (verify.ts).
import { exactProtocol } from '../../../../x402/schemes/exact/index.ts';
import { asExactPayment, EXACT } from '../../../../x402/schemes/exact/schemas.ts';
import type { GatewayScheme } from '../scheme.ts';
import { entryTerms } from '../entry.ts';
import { verifyGatePayment } from './verify.ts';

export const exactGatewayScheme: GatewayScheme = {
  protocol: exactProtocol,
  readsFacilitator: false,
  settlesAfterCall: false,
  extensions: {},

  // The amount to pay exactly; `extra` holds the token's EIP-712 name and version, as unmodified
  // x402 v1 clients insist.
  challengeEntry(config, price, resource) {
    return {
      ...entryTerms(config, EXACT, price, resource),
      extra: { name: config.domain.name, version: config.domain.version },
    };
  },

  async verify(config, payment, requirements, at) {
    const exact = asExactPayment(payment);
    if (!exact) return { ok: false, cause: 'invalid_payload' };
    const verified = await verifyGatePayment(config, exact, requirements, at);
    return verified.ok ? { ok: true, payer: verified.payment.payer, nonce: verified.payment.nonce } : verified;
  },

  momentInside(config, payment) {
    const exact = asExactPayment(payment);
    if (!exact) return null;
    const inside = Number(BigInt(exact.payload.authorization.validBefore) - BigInt(config.validityMarginSeconds) - 1n);
    return Number.isSafeInteger(inside) ? inside : null;
  },
};
