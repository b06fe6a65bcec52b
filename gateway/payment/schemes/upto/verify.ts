// The gate's verification of an `upto` payment before the upstream is called: off chain,
// x402/schemes/upto/verify.ts against the entry the gate offered (this chain and token, its payee,
// the tenant facilitator's address it named, the maximum, the validity margin); then on chain,
// what the x402 upto spec asks of a verifier: the Permit2 nonce unused, the payer's balance at
// least the maximum, and its allowance to Permit2 at least the maximum unless the payment carries
// a valid EIP-2612 sponsoring permit. Every call to the node has a deadline and fails closed: a
// node that is down or slow refuses the payment with the same coarse 402.
import { getAddress } from 'ethers';
import type { OfferedPayment, PaymentRequirements } from '../../../../x402/schemas.ts';
import { contractSignatureCheckFor } from '../../../../x402/erc1271.ts';
import { SCHEME_UPTO, sponsoredPermitOf, UptoPayment } from '../../../../x402/schemes/upto/schemas.ts';
import { verifyUptoPayment, type VerifiedUptoPayment } from '../../../../x402/schemes/upto/verify.ts';
import { caip2Network } from '../../../../x402/v2.ts';
import type { PaymentConfig } from '../../config.ts';
import { payerState } from './chain.ts';

export type GateUptoResult = { ok: true; payment: VerifiedUptoPayment } | { ok: false; cause: string };

/** The address the challenge entry named as the only facilitator that may settle; null when none. */
function facilitatorNamed(requirements: PaymentRequirements): string | null {
  const named = requirements.extra?.facilitatorAddress;
  try {
    return typeof named === 'string' ? getAddress(named) : null;
  } catch {
    return null;
  }
}

/**
 * The offered payment as the v2 upto payment the payer signed for the entry it pays (the dialect
 * checked its `accepted` terms against that entry), with the extensions the payer sent; null when
 * it is not one.
 */
function asUptoPayment(
  config: PaymentConfig,
  payment: OfferedPayment,
  requirements: PaymentRequirements,
): UptoPayment | null {
  const parsed = UptoPayment.safeParse({
    x402Version: 2,
    accepted: {
      scheme: payment.scheme,
      network: payment.network === config.network ? caip2Network(config.domain.chainId) : payment.network,
      amount: requirements.maxAmountRequired,
      asset: requirements.asset,
      payTo: requirements.payTo,
      maxTimeoutSeconds: requirements.maxTimeoutSeconds,
    },
    payload: payment.payload,
    ...(payment.extensions ? { extensions: payment.extensions } : {}),
  });
  return parsed.success ? parsed.data : null;
}

/** `at` (unix seconds) judges the validity window at another moment than now (flow.ts, a resumed payment). */
export async function verifyGateUpto(
  config: PaymentConfig,
  payment: OfferedPayment,
  requirements: PaymentRequirements,
  at?: number,
): Promise<GateUptoResult> {
  if (payment.scheme !== SCHEME_UPTO || requirements.scheme !== SCHEME_UPTO)
    return { ok: false, cause: 'unsupported_scheme' };
  const facilitator = facilitatorNamed(requirements);
  if (!facilitator) return { ok: false, cause: 'facilitator_unknown' };
  const upto = asUptoPayment(config, payment, requirements);
  if (!upto) return { ok: false, cause: 'invalid_payload' };
  const maximum = BigInt(requirements.maxAmountRequired);
  const { rpcUrl, timeoutMs } = config.contractSignatures;
  try {
    const verified = await verifyUptoPayment(
      upto,
      {
        network: caip2Network(config.domain.chainId),
        token: config.domain,
        payTo: requirements.payTo,
        facilitator,
        maxAmount: maximum,
        now: at ?? Math.floor(Date.now() / 1000),
        marginSeconds: config.validityMarginSeconds,
      },
      contractSignatureCheckFor(rpcUrl, timeoutMs),
    );
    if (!verified.ok) return verified;
    // Charged after the call: a deadline too near would let the authorization expire before its
    // charge is sent (a payer signing one would be served for free). A resumed payment (`at`)
    // was judged when it first arrived.
    const now = Math.floor(Date.now() / 1000);
    if (at === undefined && verified.payment.deadline < BigInt(now + config.chargedAfterCall.minWindowSeconds))
      return { ok: false, cause: 'deadline_too_near' };
    const { payer, nonce, token, permit2612 } = verified.payment;
    const state = await payerState({ rpcUrl, timeoutMs }, token, payer, nonce);
    if (state.nonceUsed) return { ok: false, cause: 'nonce_used' };
    if (state.balance < maximum) return { ok: false, cause: 'insufficient_balance' };
    if (!permit2612 && state.allowance < maximum) return { ok: false, cause: 'permit2_allowance_required' };
    return { ok: true, payment: verified.payment };
  } catch {
    return { ok: false, cause: 'chain_check_unavailable' };
  }
}

/**
 * Why a verified payment's charge was not collected, as the chain shows it now: the payer's
 * balance below the charge (its funds moved), its allowance to Permit2 below it with no
 * sponsoring permit (revoked), or the Permit2 nonce used (the authorization spent elsewhere);
 * null when none of these holds or the chain cannot be read. The facilitator answers one coarse
 * reason by contract, so the seller's loss is told from the chain instead.
 */
export async function uptoUncollectedCause(
  config: PaymentConfig,
  payment: OfferedPayment,
  requirements: PaymentRequirements,
  charge: bigint,
): Promise<'payer_balance_short' | 'payer_allowance_revoked' | 'authorization_used' | null> {
  const upto = asUptoPayment(config, payment, requirements);
  if (!upto) return null;
  const authorization = upto.payload.permit2Authorization;
  const sponsored = sponsoredPermitOf(upto).kind === 'permit';
  try {
    const state = await payerState(
      config.contractSignatures,
      getAddress(authorization.permitted.token),
      getAddress(authorization.from),
      BigInt(authorization.nonce),
    );
    if (state.nonceUsed) return 'authorization_used';
    if (state.balance < charge) return 'payer_balance_short';
    if (!sponsored && state.allowance < charge) return 'payer_allowance_revoked';
    return null;
  } catch {
    return null;
  }
}
