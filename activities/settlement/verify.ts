// Step 1 of a settlement: independent re-verification. The facilitator trusts no client, so
// it checks again what the gateway checked (signature, recipient, amount within
// maxAmountRequired, validity window, network and asset) and then asks the chain: is the
// authorization unused (authorizationState), does the payer hold the amount, and would the
// exact transaction succeed (eth_call). The gas plan is read in the same round of calls.
import { getAddress } from 'ethers';
import { verifyExactPayment } from '../../facilitator/x402/verify.ts';
import { authorizationUsed, simulate, tokenBalance, transferCalldata } from '../../facilitator/chain.ts';
import { completeSettlement, findSettlement, loadSettleRequest, recordRejected, type SettlementRecord } from '../../facilitator/store.ts';
import type { SettleRequest } from '../../facilitator/x402/schemas.ts';
import type { SettlementDeps, SettlementOutcome, VerifyStep } from './types.ts';

export function outcomeOfRecord(record: SettlementRecord): SettlementOutcome {
  const status = record.status === 'settled' ? 'settled' : record.status === 'failed' ? 'failed' : 'pending';
  return { status, payer: getAddress(record.payer), transaction: record.txHash, cause: record.failureCause };
}

// Gas estimates are padded: the estimate is exact for the simulated state, and the margin
// covers a storage slot warmed or cooled by an earlier transaction in the same block.
const GAS_HEADROOM_PERCENT = 120n;

export function createVerifyActivity(deps: SettlementDeps) {
  return async function verifySettlement(key: string): Promise<VerifyStep> {
    const [stored, existing] = await Promise.all([loadSettleRequest(deps.pool, key), findSettlement(deps.pool, key)]);
    if (existing && existing.status !== 'claimed') {
      if (existing.status === 'settled' || existing.status === 'failed') return { step: 'final', outcome: outcomeOfRecord(existing) };
      return { step: 'sent', payer: getAddress(existing.payer), txHash: existing.txHash! };
    }
    if (!stored) throw new Error('settle request missing for key');
    const request: SettleRequest = stored.request;
    const authorization = request.paymentPayload.payload.authorization;
    const payer = getAddress(authorization.from);

    const refuse = async (cause: string): Promise<VerifyStep> => {
      // A claimed record (a run resumed after a crash) gives its reservation back.
      if (existing) await completeSettlement(deps.pool, key, { status: 'failed', cause });
      else {
        await recordRejected(deps.pool, {
          key,
          accountId: stored.accountId,
          payer,
          payTo: authorization.to,
          amount: BigInt(authorization.value),
          validBefore: BigInt(authorization.validBefore),
          cause,
        });
      }
      return { step: 'rejected', payer, cause };
    };

    const requirements = request.paymentRequirements;
    if (request.x402Version !== 1) return refuse('unsupported_version');
    if (requirements.scheme !== request.paymentPayload.scheme) return refuse('unsupported_scheme');
    if (requirements.network !== request.paymentPayload.network) return refuse('network_mismatch');
    const checked = verifyExactPayment(request.paymentPayload, {
      network: deps.config.network,
      domain: deps.config.domain,
      asset: requirements.asset,
      payTo: requirements.payTo,
      amount: { atMost: BigInt(requirements.maxAmountRequired) },
      now: Math.floor(Date.now() / 1000),
      marginSeconds: deps.config.validityMarginSeconds,
    });
    if (!checked.ok) return refuse(checked.cause);

    const token = deps.config.tokenAddress;
    const tx = { from: deps.signer.address, to: token, data: transferCalldata(authorization, request.paymentPayload.payload.signature) };
    // One round of independent reads, in parallel.
    const [used, balance, simulation, gasLimit, fees, chainNonce] = await Promise.all([
      authorizationUsed(deps.provider, token, payer, authorization.nonce),
      tokenBalance(deps.provider, token, payer),
      simulate(deps.provider, tx),
      deps.provider.estimateGas(tx).catch(() => 200_000n),
      deps.provider.getFeeData(),
      deps.provider.getTransactionCount(deps.signer.address, 'pending'),
    ]);
    if (used) return refuse('nonce_used');
    if (balance < checked.payment.value) return refuse('insufficient_balance');
    if (simulation) return refuse(simulation);

    const priority = fees.maxPriorityFeePerGas ?? 1_000_000n;
    return {
      step: 'verified',
      transfer: {
        payer,
        payTo: checked.payment.payTo,
        amount: checked.payment.value.toString(),
        validBefore: checked.payment.validBefore.toString(),
      },
      gas: {
        gasLimit: ((gasLimit * GAS_HEADROOM_PERCENT) / 100n).toString(),
        maxFeePerGas: (fees.maxFeePerGas ?? (fees.gasPrice ?? 0n) * 2n).toString(),
        maxPriorityFeePerGas: priority.toString(),
        chainNonce,
      },
    };
  };
}
