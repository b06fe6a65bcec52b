// Step 1 for a `batch-settlement` settlement: independent re-verification, as verify.ts does for
// `exact`, and the call the gas wallet sends for it (signed, where it needs one, by this
// facilitator's receiver authorizer: the channels delegate that role to it). By action:
// a deposit's ERC-3009 authorization and voucher against the requirements and the channel
// (x402/schemes/batch-settlement/verify.ts), the authorization unused and the payer's balance;
// a claim's every row (our asset and receiver authorizer, a total within its voucher's ceiling,
// the voucher signed as the contract checks it, the escrow covering it), moving the sum of what
// each row raises; a settle's claimed-and-unsent total (none: nothing to settle); a refund's
// zero-charge voucher, its nonce the channel's, the unclaimed escrow it returns (the voucher's
// ceiling is claimed first, in the same transaction, so a refund never returns what the payer
// let the receiver claim). Then the very call is simulated and its gas estimated.
import { getAddress, type JsonRpcProvider } from 'ethers';
import { BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS } from '../../contracts/batch-settlement.ts';
import { contractSignatureCheck } from '../../x402/erc1271.ts';
import type { BatchSettleRequest, ClaimRow } from '../../x402/schemes/batch-settlement/settle-request.ts';
import {
  channelIdOf,
  claimBatchDigest,
  erc3009DepositNonce,
  refundDigest,
} from '../../x402/schemes/batch-settlement/typed-data.ts';
import {
  verifyClaimRow,
  verifyDeposit,
  verifyVoucher,
  type DepositExpectation,
} from '../../x402/schemes/batch-settlement/verify.ts';
import type { FacilitatorConfig } from '../config.ts';
import { authorizationUsed, pendingNonce } from '../chain.ts';
import { payerFunds } from '../upto-chain.ts';
import {
  channelSnapshot,
  claimCalldata,
  depositCalldata,
  multicallCalldata,
  receiverTotals,
  refundCalldata,
  settleCalldata,
  simulateBatch,
} from '../batch-chain.ts';
import { NO_TRANSACTION, estimatedGas, uptoTermsMismatch } from './verify-upto.ts';
import type { Reverified, SettlementDeps, VerifiedTransfer } from './types.ts';

type Refund = Extract<BatchSettleRequest['action'], { type: 'refund' }>;
type Deposit = Extract<BatchSettleRequest['action'], { type: 'deposit' }>;

/** The requirements' terms that need neither signature nor chain: the network and asset (a settle's token too) are ours. */
export function batchTermsMismatch(
  config: Pick<FacilitatorConfig, 'network' | 'domain' | 'tokenAddress'>,
  request: BatchSettleRequest,
): string | null {
  const { action } = request;
  const asset = action.type === 'settle' ? action.token : request.asset;
  return uptoTermsMismatch(config, request) ?? uptoTermsMismatch(config, { network: request.network, asset });
}

/**
 * What a deposit is checked against: the requirements' payee, receiver authorizer (the
 * server's, or ours when it delegates) and withdraw delay, its price as the voucher's ceiling
 * (a facilitator keeps no ledger of charges), our token's domain, now.
 */
export function depositExpectation(
  config: Pick<FacilitatorConfig, 'domain' | 'validityMarginSeconds'>,
  request: BatchSettleRequest & { action: Deposit },
): DepositExpectation {
  return {
    token: config.domain,
    payTo: request.payTo,
    receiverAuthorizer: request.receiverAuthorizer ?? request.action.channelConfig.receiverAuthorizer,
    withdrawDelay: request.withdrawDelay,
    ceiling: BigInt(request.amount),
    now: Math.floor(Date.now() / 1000),
    marginSeconds: config.validityMarginSeconds,
  };
}

/** A refund's own claim row: the payer's zero-charge voucher, claimed up to its ceiling. */
function refundClaimRow(action: Refund): ClaimRow {
  const { channelConfig: channel, voucher } = action;
  return {
    voucher: { channel, maxClaimableAmount: voucher.maxClaimableAmount },
    signature: voucher.signature,
    totalClaimed: voucher.maxClaimableAmount,
  };
}

function claimEntries(chainId: number, rows: readonly ClaimRow[]) {
  return rows.map((row) => ({
    channelId: channelIdOf(chainId, row.voucher.channel),
    maxClaimableAmount: BigInt(row.voucher.maxClaimableAmount),
    totalClaimed: BigInt(row.totalClaimed),
  }));
}

/** The ClaimBatch digest of these rows: what the receiver authorizer signs, and what names a claim. */
export function claimBatchDigestOf(chainId: number, rows: readonly ClaimRow[]): string {
  return claimBatchDigest(chainId, claimEntries(chainId, rows));
}

function authorizerOf(deps: SettlementDeps) {
  const authorizer = deps.signer.receiverAuthorizer;
  if (!authorizer) throw new Error('no receiver authorizer key is configured');
  return authorizer;
}

/**
 * The call the gas wallet sends for the request. A claim's and a refund's carry the receiver
 * authorizer's signatures (deterministic: the same request always makes the same calldata, so
 * what was simulated is what is signed and stored).
 */
export async function batchCall(
  deps: SettlementDeps,
  request: BatchSettleRequest,
): Promise<{ to: string; data: string }> {
  const chainId = deps.config.domain.chainId;
  const { action } = request;
  const call = async (): Promise<string> => {
    switch (action.type) {
      case 'deposit':
        return depositCalldata(action);
      case 'settle':
        return settleCalldata(getAddress(action.receiver.toLowerCase()), getAddress(action.token.toLowerCase()));
      case 'claim': {
        const signature = await authorizerOf(deps).signDigest(claimBatchDigestOf(chainId, action.claims));
        return claimCalldata(action.claims, signature);
      }
      case 'refund': {
        const authorizer = authorizerOf(deps);
        const row = refundClaimRow(action);
        const nonce = BigInt(request.resolved?.refundNonce ?? NaN);
        const amount = BigInt(request.resolved?.refundAmount ?? NaN);
        const channelId = channelIdOf(chainId, action.channelConfig);
        const [claimSignature, refundSignature] = await Promise.all([
          authorizer.signDigest(claimBatchDigestOf(chainId, [row])),
          authorizer.signDigest(refundDigest(chainId, channelId, nonce, amount)),
        ]);
        return multicallCalldata([
          claimCalldata([row], claimSignature),
          refundCalldata(action.channelConfig, amount, nonce, refundSignature),
        ]);
      }
    }
  };
  return { to: BATCH_SETTLEMENT_ADDRESS, data: await call() };
}

type Checked = { ok: true; transfer: VerifiedTransfer } | { ok: false; cause: string };

async function checkDeposit(deps: SettlementDeps, request: BatchSettleRequest & { action: Deposit }): Promise<Checked> {
  const { action } = request;
  const { config, provider } = deps;
  const channelId = action.voucher.channelId.toLowerCase();
  const channel = await channelSnapshot(provider, channelId);
  const verified = await verifyDeposit(
    action,
    depositExpectation(config, request),
    channel,
    contractSignatureCheck((tx) => provider.call(tx)),
  );
  if (!verified.ok) return verified;
  const auth = action.deposit.authorization;
  if (!('erc3009Authorization' in auth)) return { ok: false, cause: 'erc3009_authorization_required' };
  const nonce = erc3009DepositNonce(channelId, auth.erc3009Authorization.salt);
  const [used, funds] = await Promise.all([
    authorizationUsed(provider, config.tokenAddress, verified.payer, nonce),
    payerFunds(provider, getAddress(config.tokenAddress), verified.payer),
  ]);
  if (used) return { ok: false, cause: 'nonce_used' };
  if (funds.balance < verified.amount) return { ok: false, cause: 'insufficient_balance' };
  return {
    ok: true,
    transfer: {
      payer: verified.payer,
      payTo: ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
      amount: verified.amount,
      validBefore: verified.validBefore,
    },
  };
}

async function checkClaim(deps: SettlementDeps, rows: readonly ClaimRow[]): Promise<Checked> {
  const { config, provider } = deps;
  const expect = {
    chainId: config.domain.chainId,
    asset: config.tokenAddress,
    receiverAuthorizer: authorizerOf(deps).address,
  };
  const contracts = contractSignatureCheck((tx) => provider.call(tx));
  const verified = await Promise.all(rows.map((row) => verifyClaimRow(row, expect, contracts)));
  const failed = verified.find((v) => !v.ok);
  if (failed && !failed.ok) return failed;
  const ok = verified.filter((v) => v.ok);
  if (new Set(ok.map((v) => v.channelId)).size !== ok.length) return { ok: false, cause: 'claim_payload' };
  const channels = await Promise.all(ok.map((v) => channelSnapshot(provider, v.channelId)));
  let raised = 0n;
  for (const [i, row] of ok.entries()) {
    const channel = channels[i]!;
    if (row.totalClaimed > channel.balance) return { ok: false, cause: 'cumulative_exceeds_balance' };
    if (row.totalClaimed > channel.totalClaimed) raised += row.totalClaimed - channel.totalClaimed;
  }
  const receiver = ok[0]!.receiver;
  return { ok: true, transfer: { payer: receiver, payTo: receiver, amount: raised, validBefore: 0n } };
}

async function checkSettle(
  provider: JsonRpcProvider,
  action: Extract<BatchSettleRequest['action'], { type: 'settle' }>,
): Promise<Checked> {
  const receiver = getAddress(action.receiver.toLowerCase());
  const totals = await receiverTotals(provider, receiver, getAddress(action.token.toLowerCase()));
  const amount = totals.totalClaimed - totals.totalSettled;
  if (amount <= 0n) return { ok: false, cause: 'nothing_to_settle' };
  return { ok: true, transfer: { payer: receiver, payTo: receiver, amount, validBefore: 0n } };
}

async function checkRefund(deps: SettlementDeps, request: BatchSettleRequest, action: Refund): Promise<Checked> {
  const { config, provider } = deps;
  const chainId = config.domain.chainId;
  const channel = await channelSnapshot(provider, channelIdOf(chainId, action.channelConfig));
  const verified = await verifyVoucher(
    action,
    {
      chainId,
      asset: config.tokenAddress,
      payTo: request.payTo,
      receiverAuthorizer: authorizerOf(deps).address,
      withdrawDelay: request.withdrawDelay,
      ceiling: 0n,
    },
    channel,
    contractSignatureCheck((tx) => provider.call(tx)),
  );
  if (!verified.ok) return verified;
  if (BigInt(request.resolved?.refundNonce ?? -1) !== channel.refundNonce)
    return { ok: false, cause: 'refund_nonce_used' };
  const claimed =
    verified.maxClaimableAmount > channel.totalClaimed ? verified.maxClaimableAmount : channel.totalClaimed;
  const available = channel.balance - claimed;
  const requested = BigInt(request.resolved?.refundAmount ?? 0);
  const amount = requested < available ? requested : available;
  if (amount <= 0n) return { ok: false, cause: 'refund_no_balance' };
  return { ok: true, transfer: { payer: verified.payer, payTo: verified.payer, amount, validBefore: 0n } };
}

function check(deps: SettlementDeps, request: BatchSettleRequest): Promise<Checked> {
  const { action } = request;
  switch (action.type) {
    case 'deposit':
      return checkDeposit(deps, { ...request, action });
    case 'claim':
      return checkClaim(deps, action.claims);
    case 'settle':
      return checkSettle(deps.provider, action);
    case 'refund':
      return checkRefund(deps, request, action);
  }
}

export async function reverifyBatch(deps: SettlementDeps, request: BatchSettleRequest): Promise<Reverified> {
  const mismatch = batchTermsMismatch(deps.config, request);
  if (mismatch) return { ok: false, cause: mismatch };
  if (request.action.type !== 'deposit' && request.action.type !== 'settle' && !deps.signer.receiverAuthorizer)
    return { ok: false, cause: 'authorizer_not_configured' };
  const checked = await check(deps, request);
  if (!checked.ok) return checked;
  const { transfer } = checked;
  // A claim the chain already holds moves nothing: no transaction, so no gas plan either.
  if (request.action.type === 'claim' && transfer.amount === 0n) return { ok: true, transfer, gas: NO_TRANSACTION };
  const tx = { from: deps.signer.address, ...(await batchCall(deps, request)) };
  const [simulation, fees, chainNonce] = await Promise.all([
    simulateBatch(deps.provider, tx),
    deps.fees.current(),
    pendingNonce(deps.provider, deps.signer.address),
  ]);
  if (simulation) return { ok: false, cause: simulation };
  return { ok: true, transfer, gas: await estimatedGas(deps, tx, fees, chainNonce) };
}
