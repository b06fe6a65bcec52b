// Off-chain checks of an x402 `batch-settlement` payment, pure but for the optional ERC-1271
// question: the channel config must hash to the voucher's channel id and name the asset, the
// payee, the expected receiver authorizer and withdraw delay; the voucher must be signed as the
// channel contract will check it (a payer authorizer's key, ECDSA only; without one, the payer's
// key or ERC-1271); its cumulative ceiling must be exactly what the server has charged so far
// plus this call's price, and lie within the escrow. A deposit's ERC-3009 authorization must pull
// the deposit to the collector for this channel, from the payer, now. Causes are the scheme's own
// error names (the x402 batch-settlement EVM spec), so a server can answer with them.
import { getAddress } from 'ethers';
import { checksummed } from '../../address.ts';
import { recoverStrict } from '../../ecdsa.ts';
import type { ContractSignatureCheck } from '../../erc1271.ts';
import type { TokenDomain } from '../../token.ts';
import type { BatchSettlementPayload, ChannelConfig, DepositPayload } from './schemas.ts';
import {
  MAX_WITHDRAW_DELAY,
  MIN_WITHDRAW_DELAY,
  channelIdOf,
  depositAuthorizationDigest,
  erc3009DepositNonce,
  voucherDigest,
} from './typed-data.ts';

type VerifyCause = `invalid_batch_settlement_evm_${
  | 'channel_id_mismatch'
  | 'token_mismatch'
  | 'receiver_mismatch'
  | 'receiver_authorizer_mismatch'
  | 'withdraw_delay_mismatch'
  | 'withdraw_delay_out_of_range'
  | 'voucher_signature'
  | 'cumulative_amount_mismatch'
  | 'channel_not_found'
  | 'cumulative_exceeds_balance'
  | 'cumulative_below_claimed'
  | 'claim_payload'}`;

type DepositCause =
  | VerifyCause
  | `invalid_batch_settlement_evm_${
      | 'erc3009_authorization_required'
      | 'deposit_below_min_deposit'
      | 'payload_authorization_valid_after'
      | 'payload_authorization_valid_before'
      | 'receive_authorization_signature'}`;

export type VoucherExpectation = {
  chainId: number;
  /** The asset the requirements name: the channel's token. */
  asset: string;
  /** The requirements' payTo: the channel's receiver. */
  payTo: string;
  /** `extra.receiverAuthorizer`: who signs claims and refunds for the receiver. */
  receiverAuthorizer: string;
  /** `extra.withdrawDelay`, when the requirements name one. */
  withdrawDelay?: number;
  /** This call's price (the requirements' amount); zero for a refund's voucher. */
  ceiling: bigint;
};

/**
 * The channel as the server knows it: the on-chain escrow and claims, and its own charged total
 * (absent for a facilitator, which keeps no ledger of charges: the ceiling is then not checked
 * against one).
 */
export type ChannelState = { balance: bigint; totalClaimed: bigint; chargedCumulativeAmount?: bigint };

export type VoucherVerifyResult =
  | { ok: true; channelId: string; payer: string; maxClaimableAmount: bigint; signer: 'eoa' | 'contract' }
  | { ok: false; cause: VerifyCause };

const fail = <C>(cause: C): { ok: false; cause: C } => ({ ok: false, cause });

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;

/** The same 20 bytes (a checksum's letter case is not compared: the contract sees bytes). */
function sameAddress(a: string, b: string): boolean {
  return ADDRESS.test(a) && ADDRESS.test(b) && a.toLowerCase() === b.toLowerCase();
}

function checkConfig(config: ChannelConfig, channelId: string, expect: VoucherExpectation): VerifyCause | null {
  let computed: string;
  try {
    computed = channelIdOf(expect.chainId, config);
  } catch {
    return 'invalid_batch_settlement_evm_channel_id_mismatch';
  }
  if (computed !== channelId.toLowerCase()) return 'invalid_batch_settlement_evm_channel_id_mismatch';
  if (!sameAddress(config.receiver, expect.payTo)) return 'invalid_batch_settlement_evm_receiver_mismatch';
  if (!sameAddress(config.receiverAuthorizer, expect.receiverAuthorizer))
    return 'invalid_batch_settlement_evm_receiver_authorizer_mismatch';
  if (!sameAddress(config.token, expect.asset)) return 'invalid_batch_settlement_evm_token_mismatch';
  if (expect.withdrawDelay !== undefined && config.withdrawDelay !== expect.withdrawDelay)
    return 'invalid_batch_settlement_evm_withdraw_delay_mismatch';
  if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY)
    return 'invalid_batch_settlement_evm_withdraw_delay_out_of_range';
  return null;
}

/**
 * Who signed the voucher, as the channel contract decides: with a payer authorizer only that
 * key (ECDSA, no ERC-1271); without one the payer's key, else (with `contracts`) the payer's
 * ERC-1271 answer. Null: nobody it accepts.
 */
async function voucherSigner(
  config: ChannelConfig,
  digest: string,
  signature: string,
  contracts: ContractSignatureCheck | undefined,
): Promise<'eoa' | 'contract' | null> {
  const recovered = recoverStrict(digest, signature);
  const zero = BigInt(config.payerAuthorizer) === 0n;
  if (!zero) return recovered !== null && sameAddress(recovered, config.payerAuthorizer) ? 'eoa' : null;
  if (recovered !== null && sameAddress(recovered, config.payer)) return 'eoa';
  if (contracts && (await contracts(checksummed(config.payer), digest, signature))) return 'contract';
  return null;
}

/**
 * Verifies the voucher of a deposit, voucher or refund payload against the requirements and the
 * channel. `channel.balance` is the escrow the voucher may draw on (for a deposit, the balance
 * after it). A plain voucher must raise the on-chain claimed total; a deposit's or refund's may
 * equal it. Without `contracts` no I/O; with it an ERC-1271 question may throw on an outage.
 */
export async function verifyVoucher(
  payload: BatchSettlementPayload,
  expect: VoucherExpectation,
  channel: ChannelState,
  contracts?: ContractSignatureCheck,
): Promise<VoucherVerifyResult> {
  const terms = voucherTerms(payload, expect);
  if (!terms.ok) return terms;
  const signer = await terms.signer(contracts);
  if (!signer) return fail('invalid_batch_settlement_evm_voucher_signature');
  const stateCause = voucherStateCause(payload.type, terms.maxClaimableAmount, expect.ceiling, channel);
  return stateCause ? fail(stateCause) : { ...terms, signer };
}

/**
 * What verifyVoucher checks of the voucher itself (its channel config against the terms), with
 * the signature's check left to `signer`, run when asked: the recovery is most of the check's
 * time, which a server may spend while its first write for the call is in flight. Nobody may be
 * served before `signer` answered.
 */
export function voucherTerms(
  payload: BatchSettlementPayload,
  expect: VoucherExpectation,
):
  | (Omit<Extract<VoucherVerifyResult, { ok: true }>, 'signer'> & {
      signer(contracts?: ContractSignatureCheck): Promise<'eoa' | 'contract' | null>;
    })
  | { ok: false; cause: VerifyCause } {
  const { channelConfig: config, voucher } = payload;
  const configCause = checkConfig(config, voucher.channelId, expect);
  if (configCause) return fail(configCause);
  const maxClaimableAmount = BigInt(voucher.maxClaimableAmount);
  if (maxClaimableAmount >= 1n << 128n) return fail('invalid_batch_settlement_evm_voucher_signature');
  const channelId = voucher.channelId.toLowerCase();
  return {
    ok: true,
    channelId,
    payer: checksummed(config.payer),
    maxClaimableAmount,
    signer: (contracts) =>
      voucherSigner(config, voucherDigest(expect.chainId, channelId, maxClaimableAmount), voucher.signature, contracts),
  };
}

/** What the channel's state says of a signed voucher's ceiling; null when it may be paid. */
function voucherStateCause(
  type: BatchSettlementPayload['type'],
  maxClaimableAmount: bigint,
  ceiling: bigint,
  channel: ChannelState,
): VerifyCause | null {
  if (channel.chargedCumulativeAmount !== undefined && maxClaimableAmount !== channel.chargedCumulativeAmount + ceiling)
    return 'invalid_batch_settlement_evm_cumulative_amount_mismatch';
  if (channel.balance === 0n) return 'invalid_batch_settlement_evm_channel_not_found';
  if (maxClaimableAmount > channel.balance) return 'invalid_batch_settlement_evm_cumulative_exceeds_balance';
  const belowClaimed =
    type === 'voucher' ? maxClaimableAmount <= channel.totalClaimed : maxClaimableAmount < channel.totalClaimed;
  return belowClaimed ? 'invalid_batch_settlement_evm_cumulative_below_claimed' : null;
}

export type DepositExpectation = Omit<VoucherExpectation, 'chainId' | 'asset'> & {
  /** The asset's EIP-712 domain: its chain and address are the channel's; the authorization is signed under it. */
  token: TokenDomain;
  /** Unix seconds. */
  now: number;
  /** The authorization must outlive this many seconds, so the deposit can still land. */
  marginSeconds: number;
  /** `extra.minDeposit`, when the requirements announce one. */
  minDeposit?: bigint;
};

export type DepositVerifyResult =
  | (Extract<VoucherVerifyResult, { ok: true }> & { amount: bigint; validAfter: bigint; validBefore: bigint })
  | { ok: false; cause: DepositCause };

/**
 * Verifies a deposit payload: the ERC-3009 authorization (Permit2 deposits are not taken), then
 * the voucher against the escrow after the deposit. What needs the chain (the payer's token
 * balance, an authorization nonce already used) is left to the facilitator's simulation.
 */
export async function verifyDeposit(
  payload: DepositPayload,
  expect: DepositExpectation,
  channel: ChannelState,
  contracts?: ContractSignatureCheck,
): Promise<DepositVerifyResult> {
  const { authorization } = payload.deposit;
  if (!('erc3009Authorization' in authorization))
    return fail('invalid_batch_settlement_evm_erc3009_authorization_required');
  const a = authorization.erc3009Authorization;
  const amount = BigInt(payload.deposit.amount);
  if (amount === 0n || amount < (expect.minDeposit ?? 0n))
    return fail('invalid_batch_settlement_evm_deposit_below_min_deposit');
  const validAfter = BigInt(a.validAfter);
  const validBefore = BigInt(a.validBefore);
  // A few seconds of tolerance for a payer whose clock runs ahead of ours.
  if (validAfter > BigInt(expect.now + 5))
    return fail('invalid_batch_settlement_evm_payload_authorization_valid_after');
  if (validBefore <= BigInt(expect.now + expect.marginSeconds))
    return fail('invalid_batch_settlement_evm_payload_authorization_valid_before');

  const voucherExpectation = { ...expect, chainId: expect.token.chainId, asset: expect.token.verifyingContract };
  const voucher = await verifyVoucher(
    payload,
    voucherExpectation,
    { ...channel, balance: channel.balance + amount },
    contracts,
  );
  if (!voucher.ok) return voucher;

  const digest = depositAuthorizationDigest(expect.token, {
    from: voucher.payer,
    value: amount,
    validAfter,
    validBefore,
    nonce: erc3009DepositNonce(voucher.channelId, a.salt),
  });
  const recovered = recoverStrict(digest, a.signature);
  const byPayer =
    (recovered !== null && recovered === voucher.payer) ||
    (contracts !== undefined && (await contracts(voucher.payer, digest, a.signature)));
  if (!byPayer) return fail('invalid_batch_settlement_evm_receive_authorization_signature');
  return { ...voucher, amount, validAfter, validBefore };
}

export type ClaimExpectation = {
  chainId: number;
  /** The deployment's asset: every channel's token. */
  asset: string;
  /** This facilitator's receiver authorizer: every channel's, since it signs the batch. */
  receiverAuthorizer: string;
};

export type ClaimRowResult =
  { ok: true; channelId: string; totalClaimed: bigint; receiver: string } | { ok: false; cause: VerifyCause };

/**
 * Verifies one row of a claim batch: its channel names our asset and receiver authorizer, its
 * claimed total lies within the voucher's ceiling, and the voucher is signed as the channel
 * contract checks it. Whether the escrow covers the total is the chain's to say.
 */
export async function verifyClaimRow(
  row: {
    voucher: { channel: ChannelConfig; maxClaimableAmount: string };
    signature: string;
    totalClaimed: string;
  },
  expect: ClaimExpectation,
  contracts?: ContractSignatureCheck,
): Promise<ClaimRowResult> {
  const config = row.voucher.channel;
  let channelId: string;
  try {
    channelId = channelIdOf(expect.chainId, config);
  } catch {
    return fail('invalid_batch_settlement_evm_channel_id_mismatch');
  }
  if (!sameAddress(config.token, expect.asset)) return fail('invalid_batch_settlement_evm_token_mismatch');
  if (!sameAddress(config.receiverAuthorizer, expect.receiverAuthorizer))
    return fail('invalid_batch_settlement_evm_receiver_authorizer_mismatch');
  const ceiling = BigInt(row.voucher.maxClaimableAmount);
  const totalClaimed = BigInt(row.totalClaimed);
  if (ceiling >= 1n << 128n || totalClaimed > ceiling) return fail('invalid_batch_settlement_evm_claim_payload');
  const digest = voucherDigest(expect.chainId, channelId, ceiling);
  if (!(await voucherSigner(config, digest, row.signature, contracts)))
    return fail('invalid_batch_settlement_evm_voucher_signature');
  return { ok: true, channelId, totalClaimed, receiver: getAddress(config.receiver) };
}
