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
import { signerKindOf } from '../../x402/schemes/exact/verify.ts';
import { UPTO_PROXY_ADDRESS } from '../../contracts/upto-proxy.ts';
import { uptoCalldata } from '../upto-chain.ts';
import { drawsOwnGasBudget, isBatchRequest, isUptoRequest, settlementKind, type SettlementRequest } from './request.ts';
import { batchCall } from './verify-batch.ts';
import type { GasPlan, SettlementDeps, VerifiedTransfer } from './types.ts';

/**
 * The chain call that settles the request: the token's transferWithAuthorization (exact), the
 * upto proxy's settle for the charge (upto), the channel contract's call with the receiver
 * authorizer's signatures (batch-settlement: verify-batch.ts).
 */
async function settlementCall(deps: SettlementDeps, request: SettlementRequest): Promise<{ to: string; data: string }> {
  if (isBatchRequest(request)) return batchCall(deps, request);
  if (isUptoRequest(request))
    return { to: UPTO_PROXY_ADDRESS, data: uptoCalldata(request.payment, BigInt(request.charge)) };
  const payment = request.paymentPayload;
  return {
    to: deps.config.tokenAddress,
    data: transferCalldata(
      payment.payload.authorization,
      payment.payload.signature,
      signerKindOf(deps.config.domain, payment.payload.authorization, payment.payload.signature),
    ),
  };
}

async function signTransfer(
  deps: SettlementDeps,
  request: SettlementRequest,
  gas: GasPlan,
  nonce: number,
): Promise<{ raw: string; hash: string }> {
  const raw = await deps.signer.signTransaction({
    type: 2,
    chainId: deps.config.domain.chainId,
    ...(await settlementCall(deps, request)),
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
  request: SettlementRequest,
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
  request: SettlementRequest,
  transfer: VerifiedTransfer,
  gas: GasPlan,
  presigned?: PresignedTransaction,
  /** The outbox: the request is stored by the reservation statement itself (first writer wins). */
  storeRequest = false,
): Promise<Reservation> {
  return reserveNonce(deps.pool, {
    key,
    account,
    kind: settlementKind(request, deps.config.network),
    payer: transfer.payer,
    payTo: transfer.payTo,
    amount: transfer.amount,
    validBefore: transfer.validBefore,
    defaults: deps.config.guardrails,
    gasAtRiskWei: gas.gasLimit * gas.maxFeePerGas,
    ownGas: drawsOwnGasBudget(request),
    presigned,
    request: storeRequest ? request : undefined,
  });
}

export async function sign(
  deps: SettlementDeps,
  key: string,
  request: SettlementRequest,
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
