// What the x402 `batch-settlement` parties sign, as EIP-712 typed data under the channel
// contract's domain ("x402 Batch Settlement", version "1", the chain, the canonical contract):
// the channel config (its hash is the channel id), the payer's cumulative Voucher, and the
// receiver authorizer's Refund and ClaimBatch; plus the payer's ERC-3009 ReceiveWithAuthorization
// of a deposit, under the token's domain, whose nonce binds the channel. Pure functions. Facts
// from the published interfaces: the type strings are the x402 batch-settlement contract's
// typehashes, which @x402/evm signs. Pure functions (a channel id is kept once computed).
import { LRUCache } from 'lru-cache';
import { AbiCoder, TypedDataEncoder, getAddress, getBytes, keccak256, toUtf8Bytes, type TypedDataDomain } from 'ethers';
import type { TokenDomain } from '../../token.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../exact/eip3009.ts';
import type { ChannelConfig } from './schemas.ts';

/** The channel contract: the verifying contract of the domain, the same address on every chain. */
export const BATCH_SETTLEMENT_ADDRESS = '0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003';
/** The collector a deposit's ReceiveWithAuthorization names as recipient. */
export const ERC3009_DEPOSIT_COLLECTOR_ADDRESS = '0x4020806089470a89826cB9fB1f4059150b550004';

/** The channel contract's bounds on a channel's withdrawDelay (15 minutes to 30 days). */
export const MIN_WITHDRAW_DELAY = 900;
export const MAX_WITHDRAW_DELAY = 2_592_000;

const CHANNEL_CONFIG_TYPES = {
  ChannelConfig: [
    { name: 'payer', type: 'address' },
    { name: 'payerAuthorizer', type: 'address' },
    { name: 'receiver', type: 'address' },
    { name: 'receiverAuthorizer', type: 'address' },
    { name: 'token', type: 'address' },
    { name: 'withdrawDelay', type: 'uint40' },
    { name: 'salt', type: 'bytes32' },
  ],
};
const VOUCHER_TYPES = {
  Voucher: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'maxClaimableAmount', type: 'uint128' },
  ],
};
const REFUND_TYPES = {
  Refund: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'nonce', type: 'uint256' },
    { name: 'amount', type: 'uint128' },
  ],
};
const CLAIM_BATCH_TYPES = {
  ClaimBatch: [{ name: 'claims', type: 'ClaimEntry[]' }],
  ClaimEntry: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'maxClaimableAmount', type: 'uint128' },
    { name: 'totalClaimed', type: 'uint128' },
  ],
};
// The same fields as EIP-3009's TransferWithAuthorization; only the primary type's name differs.
const RECEIVE_WITH_AUTHORIZATION_TYPES = {
  ReceiveWithAuthorization: TRANSFER_WITH_AUTHORIZATION_TYPES.TransferWithAuthorization,
};

export function batchSettlementDomain(chainId: number): TypedDataDomain {
  return { name: 'x402 Batch Settlement', version: '1', chainId, verifyingContract: BATCH_SETTLEMENT_ADDRESS };
}

// A payer's every voucher names the same channel config: its id (an EIP-712 hash, ~0.8 ms of CPU)
// is kept by the config's fields, so a voucher call computes it once per channel.
const channelIds = new LRUCache<string, string>({ max: 10_000 });

/** The channel id on `chainId`. Throws on an address that is none. */
export function channelIdOf(chainId: number, config: ChannelConfig): string {
  const key = [
    chainId,
    config.payer,
    config.payerAuthorizer,
    config.receiver,
    config.receiverAuthorizer,
    config.token,
    config.withdrawDelay,
    config.salt,
  ].join('|');
  let id = channelIds.get(key);
  if (id === undefined) {
    id = computeChannelId(chainId, config);
    channelIds.set(key, id);
  }
  return id;
}

function computeChannelId(chainId: number, config: ChannelConfig): string {
  return TypedDataEncoder.hash(batchSettlementDomain(chainId), CHANNEL_CONFIG_TYPES, {
    ...config,
    payer: getAddress(config.payer),
    payerAuthorizer: getAddress(config.payerAuthorizer),
    receiver: getAddress(config.receiver),
    receiverAuthorizer: getAddress(config.receiverAuthorizer),
    token: getAddress(config.token),
  });
}

// A voucher is checked on every paid call, so its digest is put together here from its two
// words rather than by TypedDataEncoder (~0.17 ms of CPU a call, its encoder and the domain's
// separator built once): keccak256(0x1901 ‖ domain separator ‖ keccak256(typehash ‖ id ‖ amount)).
// A unit test holds it to the reference's hashTypedData.
const VOUCHER_TYPEHASH = getBytes(keccak256(toUtf8Bytes(TypedDataEncoder.from(VOUCHER_TYPES).encodeType('Voucher'))));
const UINT128_LIMIT = 1n << 128n;
const BYTES32 = /^0x[0-9a-fA-F]{64}$/;
const domainSeparators = new Map<number, Uint8Array>();

function domainSeparator(chainId: number): Uint8Array {
  let separator = domainSeparators.get(chainId);
  if (separator === undefined) {
    separator = getBytes(TypedDataEncoder.hashDomain(batchSettlementDomain(chainId)));
    domainSeparators.set(chainId, separator);
  }
  return separator;
}

/** The digest the payer's authorizer signs: the channel may be claimed up to `maxClaimableAmount` in total. Throws on a channel id that is no bytes32 or an amount outside uint128, as the encoder does. */
export function voucherDigest(chainId: number, channelId: string, maxClaimableAmount: bigint): string {
  if (!BYTES32.test(channelId)) throw new TypeError('voucher channelId is not a bytes32');
  if (maxClaimableAmount < 0n || maxClaimableAmount >= UINT128_LIMIT)
    throw new RangeError('voucher maxClaimableAmount is not a uint128');
  const struct = Buffer.allocUnsafe(96);
  struct.set(VOUCHER_TYPEHASH, 0);
  struct.write(channelId.slice(2), 32, 'hex');
  struct.write(maxClaimableAmount.toString(16).padStart(64, '0'), 64, 'hex');
  const signed = Buffer.allocUnsafe(66);
  signed[0] = 0x19;
  signed[1] = 0x01;
  signed.set(domainSeparator(chainId), 2);
  signed.set(getBytes(keccak256(struct)), 34);
  return keccak256(signed);
}

/** The digest the receiver authorizer signs for refundWithSignature, at the channel's current refund nonce. */
export function refundDigest(chainId: number, channelId: string, nonce: bigint, amount: bigint): string {
  return TypedDataEncoder.hash(batchSettlementDomain(chainId), REFUND_TYPES, { channelId, nonce, amount });
}

export type ClaimEntry = { channelId: string; maxClaimableAmount: bigint; totalClaimed: bigint };

/** The digest the receiver authorizer signs for claimWithSignature over these rows, in order. */
export function claimBatchDigest(chainId: number, claims: readonly ClaimEntry[]): string {
  return TypedDataEncoder.hash(batchSettlementDomain(chainId), CLAIM_BATCH_TYPES, { claims });
}

/** The ERC-3009 nonce of a deposit: keccak256(abi.encode(channelId, salt)), so it binds the channel. */
export function erc3009DepositNonce(channelId: string, salt: string): string {
  return keccak256(AbiCoder.defaultAbiCoder().encode(['bytes32', 'uint256'], [channelId, BigInt(salt)]));
}

export type DepositAuthorization = {
  from: string;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: string;
};

/** The digest of the payer's ReceiveWithAuthorization to the ERC-3009 collector, under the token's domain. */
export function depositAuthorizationDigest(token: TokenDomain, a: DepositAuthorization): string {
  return TypedDataEncoder.hash(
    { ...token, verifyingContract: getAddress(token.verifyingContract) },
    RECEIVE_WITH_AUTHORIZATION_TYPES,
    { ...a, from: getAddress(a.from), to: ERC3009_DEPOSIT_COLLECTOR_ADDRESS },
  );
}
