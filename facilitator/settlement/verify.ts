// Step 1: independent re-verification. The facilitator trusts no client, so it checks again
// what the gateway checked (signature, recipient, amount within maxAmountRequired, validity
// window, network and asset) and then asks the chain: is the authorization unused
// (authorizationState), and would the exact transaction the gas wallet sends succeed
// (eth_call: this also covers the payer's balance, whose shortfall the token reports as its
// own error). The gas wallet's nonce is read in the same round of calls.
import { getAddress } from 'ethers';
import { verifyPayment } from '../../x402/schemes/exact/verify.ts';
import { contractSignatureCheck } from '../../x402/erc1271.ts';
import { EOA_TRANSFER_GAS_LIMIT, authorizationUsed, pendingNonce, simulate, transferCalldata } from '../chain.ts';
import type { SettlementRecord } from '../store/records.ts';
import type { ExactSettleRequest, TransferAuthorization } from '../../x402/schemes/exact/schemas.ts';
import type { Reverified, SettlementDeps, SettlementOutcome } from './types.ts';
import { isBatchRequest, isUptoRequest, type SettlementRequest } from './request.ts';
import { reverifyUpto } from './verify-upto.ts';
import { reverifyBatch } from './verify-batch.ts';

export function outcomeOfRecord(record: SettlementRecord): SettlementOutcome {
  const status = record.status === 'settled' ? 'settled' : record.status === 'failed' ? 'failed' : 'pending';
  // A transfer cancelled after the inclusion timeout has no transaction of the payer's (the
  // record keeps the cancel's hash for operators).
  // Lowercase hex: SettlementWorkflow's TxHash search attribute is set from it.
  const transaction =
    status === 'failed' && record.failureCause === 'inclusion_timeout' ? null : (record.txHash?.toLowerCase() ?? null);
  return { status, payer: getAddress(record.payer), transaction, cause: record.failureCause };
}

// Estimates (contract-wallet signatures only) are padded: exact for the simulated state, the
// margin covers a storage slot warmed or cooled by an earlier transaction in the same block.
const GAS_HEADROOM_PERCENT = 120n;

/** The gas wallet's transaction in its EOA form (the (v, r, s) overload); null when the signature has no EOA's shape. */
function eoaTransfer(
  deps: SettlementDeps,
  a: TransferAuthorization,
  signature: string,
): { from: string; to: string; data: string } | null {
  if (signature.length !== 132) return null;
  try {
    return { from: deps.signer.address, to: deps.config.tokenAddress, data: transferCalldata(a, signature, 'eoa') };
  } catch {
    return null; // not encodable (a bad checksum, a malformed signature): the check refuses it
  }
}

/** Re-verification of the request, by its scheme (an upto one: verify-upto.ts; batch-settlement: verify-batch.ts). */
export function reverify(deps: SettlementDeps, request: SettlementRequest): Promise<Reverified> {
  if (isBatchRequest(request)) return reverifyBatch(deps, request);
  return isUptoRequest(request) ? reverifyUpto(deps, request) : reverifyExact(deps, request);
}

async function reverifyExact(deps: SettlementDeps, request: ExactSettleRequest): Promise<Reverified> {
  const requirements = request.paymentRequirements;
  const payment = request.paymentPayload;
  if (request.x402Version !== 1) return { ok: false, cause: 'unsupported_version' };
  if (requirements.scheme !== payment.scheme) return { ok: false, cause: 'unsupported_scheme' };
  if (requirements.network !== payment.network) return { ok: false, cause: 'network_mismatch' };
  const token = deps.config.tokenAddress;
  const authorization = payment.payload.authorization;
  // The reads that do not depend on how the payer signed go out first and travel while the
  // signature is checked (CPU); so does the simulation of an EOA's transfer when the signature
  // has an EOA's length (the usual case; a contract wallet's is simulated after the check).
  const early = <T>(read: Promise<T>) => (read.catch(() => undefined), read);
  const used = early(authorizationUsed(deps.provider, token, authorization.from.toLowerCase(), authorization.nonce));
  const fees = early(deps.fees.current());
  const chainNonce = early(pendingNonce(deps.provider, deps.signer.address));
  const eoaTx = eoaTransfer(deps, authorization, payment.payload.signature);
  const eoaSimulation = eoaTx ? early(simulate(deps.provider, eoaTx)) : null;
  // Lets those requests reach the socket before the signature check holds the thread.
  await new Promise((resolve) => setImmediate(resolve));
  // A contract wallet's signature is asked of the wallet (ERC-1271) through the worker's node;
  // an RPC failure there is thrown, so the activity retries instead of refusing the payment.
  const checked = await verifyPayment(
    payment,
    {
      network: deps.config.network,
      domain: deps.config.domain,
      asset: requirements.asset,
      payTo: requirements.payTo,
      amount: { atMost: BigInt(requirements.maxAmountRequired) },
      now: Math.floor(Date.now() / 1000),
      marginSeconds: deps.config.validityMarginSeconds,
    },
    contractSignatureCheck((tx) => deps.provider.call(tx)),
  );
  if (!checked.ok) return { ok: false, cause: checked.cause };

  const eoa = checked.signer === 'eoa';
  const tx =
    eoa && eoaTx
      ? eoaTx
      : {
          from: deps.signer.address,
          to: token,
          data: transferCalldata(authorization, payment.payload.signature, checked.signer),
        };
  const [isUsed, simulation, estimate, fee, nonce] = await Promise.all([
    used,
    eoa && eoaSimulation ? eoaSimulation : simulate(deps.provider, tx),
    eoa ? Promise.resolve(null) : deps.provider.estimateGas(tx).catch(() => 300_000n),
    fees,
    chainNonce,
  ]);
  if (isUsed) return { ok: false, cause: 'nonce_used' };
  if (simulation) return { ok: false, cause: simulation };

  return {
    ok: true,
    transfer: {
      payer: checked.payment.payer,
      payTo: checked.payment.payTo,
      amount: checked.payment.value,
      validBefore: checked.payment.validBefore,
    },
    gas: {
      gasLimit: estimate === null ? EOA_TRANSFER_GAS_LIMIT : (estimate * GAS_HEADROOM_PERCENT) / 100n,
      maxFeePerGas: fee.maxFeePerGas,
      maxPriorityFeePerGas: fee.maxPriorityFeePerGas,
      chainNonce: nonce,
    },
  };
}
