// Steps 2 and 3: the account's guardrails with the nonce claim (one transaction), then the
// transfer signed by the gas wallet and stored with its gas nonce before it is ever sent.
import { Transaction } from 'ethers';
import { findAccountById } from '../../facilitator/accounts.ts';
import { transferCalldata } from '../../facilitator/chain.ts';
import { loadSettleRequest, reserveAndClaim, signAndPersist } from '../../facilitator/store.ts';
import type { ClaimStep, GasPlan, SettlementDeps, VerifiedTransfer } from './types.ts';

export function createClaimActivities(deps: SettlementDeps) {
  return {
    async claimSettlement(key: string, transfer: VerifiedTransfer): Promise<ClaimStep> {
      const stored = await loadSettleRequest(deps.pool, key);
      if (!stored) throw new Error('settle request missing for key');
      const account = await findAccountById(deps.pool, stored.accountId);
      if (!account) throw new Error('facilitator account missing');
      const requirements = stored.request.paymentRequirements;
      const result = await reserveAndClaim(deps.pool, {
        key,
        account,
        kind: { network: requirements.network, asset: requirements.asset },
        payer: transfer.payer,
        payTo: transfer.payTo,
        amount: BigInt(transfer.amount),
        validBefore: BigInt(transfer.validBefore),
        defaults: deps.config.guardrails,
      });
      return 'rejected' in result ? { claimed: false, rejected: result.rejected } : { claimed: true, status: result.claimed.status };
    },

    async signSettlement(key: string, gas: GasPlan): Promise<{ txHash: string }> {
      const stored = await loadSettleRequest(deps.pool, key);
      if (!stored) throw new Error('settle request missing for key');
      const payment = stored.request.paymentPayload;
      const data = transferCalldata(payment.payload.authorization, payment.payload.signature);
      const record = await signAndPersist(deps.pool, {
        key,
        gasWallet: deps.signer.address,
        chainId: deps.config.domain.chainId,
        chainNonce: gas.chainNonce,
        sign: async (nonce) => {
          const raw = await deps.signer.signTransaction({
            type: 2,
            chainId: deps.config.domain.chainId,
            to: deps.config.tokenAddress,
            data,
            nonce,
            gasLimit: BigInt(gas.gasLimit),
            maxFeePerGas: BigInt(gas.maxFeePerGas),
            maxPriorityFeePerGas: BigInt(gas.maxPriorityFeePerGas),
            value: 0n,
          });
          return { raw, hash: Transaction.from(raw).hash! };
        },
      });
      if (!record.txHash) throw new Error('settlement was not signed');
      return { txHash: record.txHash };
    },
  };
}
