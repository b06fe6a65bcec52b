// The gate's verification of an `exact` payment: the terms and the signature, as
// x402/schemes/exact/verify.ts checks them. An EOA's signature is checked without I/O; a
// contract wallet's (ERC-1271) by an eth_call to the configured node with a deadline, failing
// closed: a node that is down or slow refuses the payment with the same coarse 402.
import { verifyPayment, type VerifyResult } from '../../../../x402/schemes/exact/verify.ts';
import { contractSignatureCheckFor } from '../../../../x402/erc1271.ts';
import type { PaymentRequirements } from '../../../../x402/schemas.ts';
import type { ExactPayment } from '../../../../x402/schemes/exact/schemas.ts';
import type { PaymentConfig } from '../../config.ts';

type ExactVerifyResult = VerifyResult | { ok: false; cause: 'signature_check_unavailable' };

/**
 * `at` (unix seconds) judges the validity window at another moment than now: a payment already
 * settled for this very call is judged at a moment inside its window (gateway/payment/flow.ts),
 * since the money moved while it was valid.
 */
export async function verifyGatePayment(
  config: PaymentConfig,
  payment: ExactPayment,
  requirements: PaymentRequirements,
  at?: number,
): Promise<ExactVerifyResult> {
  const expect = {
    network: config.network,
    domain: config.domain,
    asset: requirements.asset,
    payTo: requirements.payTo,
    amount: { exact: BigInt(requirements.maxAmountRequired) },
    now: at ?? Math.floor(Date.now() / 1000),
    marginSeconds: config.validityMarginSeconds,
  };
  try {
    return await verifyPayment(
      payment,
      expect,
      contractSignatureCheckFor(config.contractSignatures.rpcUrl, config.contractSignatures.timeoutMs),
    );
  } catch {
    return { ok: false, cause: 'signature_check_unavailable' };
  }
}
