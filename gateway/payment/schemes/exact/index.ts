// The `exact` scheme at the gateway: the challenge entry of a price (the amount to pay exactly),
// and the verification of an EIP-3009 authorization (verify.ts).
import { getAddress } from 'ethers';
import { exactProtocol } from '../../../../x402/schemes/exact/index.ts';
import { asExactPayment, EXACT } from '../../../../x402/schemes/exact/schemas.ts';
import type { GatewayScheme } from '../scheme.ts';
import { verifyGatePayment } from './verify.ts';

export const exactGatewayScheme: GatewayScheme = {
  protocol: exactProtocol,

  // What unmodified x402 v1 clients (x402-fetch, x402-axios) insist on: an absolute `resource`
  // URL, `description` and `mimeType` strings, and `extra` with the token's EIP-712 name and
  // version; `outputSchema` is left out rather than null.
  challengeEntry(config, price, resource) {
    return {
      scheme: EXACT,
      network: config.network,
      maxAmountRequired: price.amount,
      resource,
      description: price.description,
      mimeType: price.mimeType,
      payTo: getAddress(price.payTo),
      maxTimeoutSeconds: config.maxTimeoutSeconds,
      asset: config.domain.verifyingContract,
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
