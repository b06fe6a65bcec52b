// Step 2, reserve: the account's guardrails with the nonce reservation (429 before anything is
// reserved), then the transfer signed by the gas wallet and stored with its gas nonce before it
// is ever sent. Presigning: the transfer is signed ahead with the gas nonce the reservation is
// predicted to take (the wallet's stored next nonce, or the node's count if higher), and the
// reservation statement takes that nonce and stores the bytes together: one round trip to
// PostgreSQL. When the prediction no longer holds (another settlement took the nonce
// meanwhile), the statement only reserves, and signing takes the next nonce under the wallet's
// row lock, as it always did.
import type { Account } from '../accounts.ts';
import { signedTransactionHash, transferCalldata } from '../chain.ts';
import { reserveNonce, type Reservation, type PresignedTransaction } from '../store/reservations.ts';
import { signAndPersist } from '../store/gas.ts';
import { type SettlementRecord } from '../store/records.ts';
import type { ExactSettleRequest } from '../../x402/schemes/exact/schemas.ts';
import { signerKindOf } from '../../x402/schemes/exact/verify.ts';
import type { GasPlan, SettlementDeps, VerifiedTransfer } from './types.ts';

async function signTransfer(
  deps: SettlementDeps,
  request: ExactSettleRequest,
  gas: GasPlan,
  nonce: number,
): Promise<{ raw: string; hash: string }> {
  const payment = request.paymentPayload;
  const raw = await deps.signer.signTransaction({
    type: 2,
    chainId: deps.config.domain.chainId,
    to: deps.config.tokenAddress,
    data: transferCalldata(
      payment.payload.authorization,
      payment.payload.signature,
      signerKindOf(deps.config.domain, payment.payload.authorization, payment.payload.signature),
    ),
    nonce,
    gasLimit: gas.gasLimit,
    maxFeePerGas: gas.maxFeePerGas,
    maxPriorityFeePerGas: gas.maxPriorityFeePerGas,
    value: 0n,
  });
  return { raw, hash: signedTransactionHash(raw) };
}

/** The transfer signed with the predicted gas nonce, for the reservation statement to store if the prediction holds. */
export async function presign(
  deps: SettlementDeps,
  request: ExactSettleRequest,
  gas: GasPlan,
  storedNonce: number | null,
): Promise<PresignedTransaction> {
  const nonce = Math.max(storedNonce ?? 0, gas.chainNonce);
  const signed = await signTransfer(deps, request, gas, nonce);
  return {
    gasWallet: deps.signer.address,
    chainId: deps.config.domain.chainId,
    chainNonce: gas.chainNonce,
    nonce,
    ...signed,
    gasLimit: gas.gasLimit,
    maxFeePerGas: gas.maxFeePerGas,
    maxPriorityFeePerGas: gas.maxPriorityFeePerGas,
  };
}

export async function reserve(
  deps: SettlementDeps,
  key: string,
  account: Account,
  request: ExactSettleRequest,
  transfer: VerifiedTransfer,
  gas: GasPlan,
  presigned?: PresignedTransaction,
  /** The outbox: the request is stored by the reservation statement itself (first writer wins). */
  storeRequest = false,
): Promise<Reservation> {
  const requirements = request.paymentRequirements;
  return reserveNonce(deps.pool, {
    key,
    account,
    kind: { network: requirements.network, asset: requirements.asset },
    payer: transfer.payer,
    payTo: transfer.payTo,
    amount: transfer.amount,
    validBefore: transfer.validBefore,
    defaults: deps.config.guardrails,
    gasAtRiskWei: gas.gasLimit * gas.maxFeePerGas,
    presigned,
    request: storeRequest ? request : undefined,
  });
}

export async function sign(
  deps: SettlementDeps,
  key: string,
  request: ExactSettleRequest,
  gas: GasPlan,
): Promise<SettlementRecord> {
  const record = await signAndPersist(deps.pool, {
    key,
    gasWallet: deps.signer.address,
    chainId: deps.config.domain.chainId,
    chainNonce: gas.chainNonce,
    sign: (nonce) => signTransfer(deps, request, gas, nonce),
  });
  if (!record.txHash) throw new Error('settlement was not signed');
  return record;
}
