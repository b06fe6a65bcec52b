// The `upto` scheme at the gateway: the challenge entry of a price (the maximum the payer
// authorizes through Permit2, for the tenant's facilitator to charge the measured amount after
// the call), its 402's eip2612GasSponsoring declaration (a payer that has not approved Permit2
// signs an EIP-2612 permit the facilitator submits), and the verification before the call
// (verify.ts). The facilitator's address is its /supported upto kind's `extra.facilitatorAddress`:
// the payer's witness must name it, so no entry is offered without it.
import { getAddress } from 'ethers';
import { declareEip2612GasSponsoringExtension } from '@x402/extensions';
import { uptoProtocol } from '../../../../x402/schemes/upto/index.ts';
import { SCHEME_UPTO, UptoPayment } from '../../../../x402/schemes/upto/schemas.ts';
import { caip2Network } from '../../../../x402/v2.ts';
import type { PaymentConfig } from '../../config.ts';
import type { SupportedKind } from '../../supported.ts';
import { entryTerms } from '../entry.ts';
import type { GatewayScheme } from '../scheme.ts';
import { uptoUncollectedCause, verifyGateUpto } from './verify.ts';

/** The facilitator's upto kind for this chain and token: the address that may settle; null when it lists none. */
function uptoFacilitatorAddress(config: PaymentConfig, kinds: readonly SupportedKind[] | null): string | null {
  const kind = kinds?.find(
    (k) =>
      k.scheme === SCHEME_UPTO &&
      k.network === caip2Network(config.domain.chainId) &&
      (k.asset === undefined || k.asset.toLowerCase() === config.domain.verifyingContract.toLowerCase()),
  );
  const address = kind?.extra?.facilitatorAddress;
  try {
    return typeof address === 'string' ? getAddress(address) : null;
  } catch {
    return null;
  }
}

export const uptoGatewayScheme: GatewayScheme = {
  protocol: uptoProtocol,
  readsFacilitator: true,
  settlesAfterCall: true,
  extensions: declareEip2612GasSponsoringExtension(),

  // The x402 v2 upto requirements (dialect.ts makes the v2 entry): the maximum as the amount, and
  // in `extra` the token's EIP-712 domain and the facilitator address, as @x402/evm's client needs.
  challengeEntry(config, price, resource, facilitator) {
    const facilitatorAddress = uptoFacilitatorAddress(config, facilitator);
    if (!facilitatorAddress) return null;
    return {
      ...entryTerms(config, SCHEME_UPTO, price, resource),
      // Long enough for the call and its settle after it: the client signs a deadline this far ahead.
      maxTimeoutSeconds: config.chargedAfterCall.timeoutSeconds,
      extra: { name: config.domain.name, version: config.domain.version, facilitatorAddress },
    };
  },

  // The Permit2 nonce names the payment, behind `upto-` so that it can never be the same string
  // as an EIP-3009 nonce (also 32 bytes of hex) of the same payer in a payment binding.
  async verify(config, payment, requirements, at) {
    const verified = await verifyGateUpto(config, payment, requirements, at);
    if (!verified.ok) return verified;
    return { ok: true, payer: verified.payment.payer, nonce: uptoBindingNonce(verified.payment.nonce) };
  },

  momentInside(config, payment) {
    const payload = UptoPayment.shape.payload.safeParse(payment.payload);
    if (!payload.success) return null;
    const deadline = BigInt(payload.data.permit2Authorization.deadline);
    const inside = Number(deadline - BigInt(config.validityMarginSeconds) - 1n);
    return Number.isSafeInteger(inside) ? inside : null;
  },

  uncollectedCause: uptoUncollectedCause,
};

/** The binding nonce of a Permit2 nonce: `upto-0x` and its 64 lowercase hex digits. */
function uptoBindingNonce(nonce: bigint): string {
  return `upto-0x${nonce.toString(16).padStart(64, '0')}`;
}
