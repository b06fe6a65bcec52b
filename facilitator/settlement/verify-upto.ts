// Step 1 for an `upto` settlement: independent re-verification, as verify.ts does for `exact`.
// Off chain: the payment against our terms (this deployment's network and asset, the request's
// payee, the gas wallet as the witness's facilitator, the deadline and validAfter, the payer's
// signature, a sponsoring EIP-2612 permit's terms and signature) with the charge at most the
// permitted amount. On chain: the Permit2 nonce unused, the payer's balance covering the charge,
// its allowance to Permit2 covering it unless a sponsoring permit comes along, and the very proxy
// call the gas wallet would send simulated. A charge of 0 moves nothing and asks the chain nothing.
import { getAddress } from 'ethers';
import { UPTO_PROXY_ADDRESS } from '../../contracts/upto-proxy.ts';
import { caip2Network } from '../../x402/v2.ts';
import { verifyUptoPayment } from '../../x402/schemes/upto/verify.ts';
import type { UptoSettleRequest } from '../../x402/schemes/upto/settle-request.ts';
import { contractSignatureCheck } from '../../x402/erc1271.ts';
import type { FacilitatorConfig } from '../config.ts';
import { pendingNonce } from '../chain.ts';
import { payerFunds, permit2NonceUsed, simulateUpto, uptoCalldata } from '../upto-chain.ts';
import type { GasPlan, Reverified, SettlementDeps } from './types.ts';

// As for a contract wallet's exact transfer (see estimatedGas).
const GAS_HEADROOM_PERCENT = 120n;

/** The names a request may give this deployment's network: its own (v1) and CAIP-2 (v2). */
export function uptoNetworks(config: Pick<FacilitatorConfig, 'network' | 'domain'>): string[] {
  return [config.network, caip2Network(config.domain.chainId)];
}

/** The requirements' terms that need neither signature nor chain: the network and asset are ours (batch-settlement's too). */
export function uptoTermsMismatch(
  config: Pick<FacilitatorConfig, 'network' | 'domain' | 'tokenAddress'>,
  request: Pick<UptoSettleRequest, 'network' | 'asset'>,
): string | null {
  if (!uptoNetworks(config).includes(request.network)) return 'network_mismatch';
  if (request.asset.toLowerCase() !== config.tokenAddress.toLowerCase()) return 'asset_mismatch';
  return null;
}

export async function reverifyUpto(deps: SettlementDeps, request: UptoSettleRequest): Promise<Reverified> {
  const mismatch = uptoTermsMismatch(deps.config, request);
  if (mismatch) return { ok: false, cause: mismatch };
  const charge = BigInt(request.charge);
  const checked = await verifyUptoPayment(
    request.payment,
    {
      network: request.network,
      token: deps.config.domain,
      payTo: request.payTo,
      facilitator: deps.signer.address,
      maxAmount: charge,
      now: Math.floor(Date.now() / 1000),
      marginSeconds: deps.config.validityMarginSeconds,
    },
    contractSignatureCheck((tx) => deps.provider.call(tx)),
  );
  if (!checked.ok) return { ok: false, cause: checked.cause };
  const payment = checked.payment;
  const transfer = { payer: payment.payer, payTo: payment.to, amount: charge, validBefore: payment.deadline + 1n };
  // Nothing to move: no transaction, so no gas plan either (the verify step records it settled).
  if (charge === 0n) return { ok: true, transfer, gas: NO_TRANSACTION };

  const tx = { from: deps.signer.address, to: UPTO_PROXY_ADDRESS, data: uptoCalldata(request.payment, charge) };
  const [used, funds, simulation, fees, chainNonce] = await Promise.all([
    permit2NonceUsed(deps.provider, payment.payer, payment.nonce),
    payerFunds(deps.provider, getAddress(deps.config.tokenAddress), payment.payer),
    simulateUpto(deps.provider, tx),
    deps.fees.current(),
    pendingNonce(deps.provider, deps.signer.address),
  ]);
  if (used) return { ok: false, cause: 'nonce_used' };
  if (funds.balance < charge) return { ok: false, cause: 'insufficient_balance' };
  if (!payment.permit2612 && funds.allowance < charge) return { ok: false, cause: 'permit2_allowance_required' };
  if (simulation) return { ok: false, cause: simulation };
  return { ok: true, transfer, gas: await estimatedGas(deps, tx, fees, chainNonce) };
}

/**
 * The gas plan of a contract call that simulated well: its estimate with headroom (exact for the
 * simulated state; the margin covers a storage slot warmed or cooled by an earlier transaction
 * in the same block), the oracle's fees, the node's pending count.
 */
export async function estimatedGas(
  deps: SettlementDeps,
  tx: { from: string; to: string; data: string },
  fees: { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint },
  chainNonce: number,
): Promise<GasPlan> {
  const estimate = await deps.provider.estimateGas(tx);
  return {
    gasLimit: (estimate * GAS_HEADROOM_PERCENT) / 100n,
    maxFeePerGas: fees.maxFeePerGas,
    maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
    chainNonce,
  };
}

/** The plan of what settles without a transaction: nothing to sign. */
export const NO_TRANSACTION: GasPlan = { gasLimit: 0n, maxFeePerGas: 0n, maxPriorityFeePerGas: 0n, chainNonce: 0 };
