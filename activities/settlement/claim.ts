// Steps 2 and 3: the account's guardrails with the nonce claim (one transaction: 429 before
// any claim), then the transfer signed by the gas wallet and stored with its gas nonce before
// it is ever sent.
import { Transaction } from 'ethers';
import type { Account } from '../../facilitator/accounts.ts';
import { transferCalldata } from '../../facilitator/chain.ts';
import { reserveAndClaim, signAndPersist, type ClaimResult, type SettlementRecord } from '../../facilitator/store.ts';
import type { SettleRequest } from '../../facilitator/x402/schemas.ts';
import { signerKindOf } from '../../facilitator/x402/verify.ts';
import type { GasPlan, SettlementDeps, VerifiedTransfer } from './types.ts';

export async function claim(deps: SettlementDeps, key: string, account: Account, request: SettleRequest, transfer: VerifiedTransfer): Promise<ClaimResult> {
  const requirements = request.paymentRequirements;
  return reserveAndClaim(deps.pool, {
    key,
    account,
    kind: { network: requirements.network, asset: requirements.asset },
    payer: transfer.payer,
    payTo: transfer.payTo,
    amount: transfer.amount,
    validBefore: transfer.validBefore,
    defaults: deps.config.guardrails,
  });
}

export async function sign(deps: SettlementDeps, key: string, request: SettleRequest, gas: GasPlan): Promise<SettlementRecord> {
  const payment = request.paymentPayload;
  const { authorization, signature } = payment.payload;
  const data = transferCalldata(authorization, signature, signerKindOf(deps.config.domain, authorization, signature));
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
        gasLimit: gas.gasLimit,
        maxFeePerGas: gas.maxFeePerGas,
        maxPriorityFeePerGas: gas.maxPriorityFeePerGas,
        value: 0n,
      });
      return { raw, hash: Transaction.from(raw).hash! };
    },
  });
  if (!record.txHash) throw new Error('settlement was not signed');
  return record;
}
