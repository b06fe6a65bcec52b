// Off-chain verification of an x402 `exact` payment: protocol fields, recipient, amount,
// validity window, nonce shape and the EIP-712 signature. The gateway runs it before it
// forwards anything; the facilitator runs it again (then adds the on-chain checks) because it
// trusts no client. Returns the precise cause for operators; callers only ever see a coarse one.
import { getAddress } from 'ethers';
import { authorizationDigest, recoverAuthorizer } from './eip3009.ts';
import type { TokenDomain } from '../../token.ts';
import type { ContractSignatureCheck } from '../../erc1271.ts';
import { X402_VERSION } from '../../schemas.ts';
import { EXACT, type ExactPayment, type TransferAuthorization } from './schemas.ts';

export type VerifyCause =
  | 'unsupported_version'
  | 'unsupported_scheme'
  | 'network_mismatch'
  | 'asset_mismatch'
  | 'recipient_mismatch'
  | 'amount_mismatch'
  | 'not_yet_valid'
  | 'expired'
  | 'invalid_nonce'
  | 'invalid_signature';

export type VerifyExpectation = {
  network: string;
  domain: TokenDomain;
  /** The asset the requirements name; must be the domain's token. */
  asset: string;
  payTo: string;
  /** `exact`: value must equal it (the gateway's price). `atMost`: 0 < value <= it (maxAmountRequired). */
  amount: { exact: bigint } | { atMost: bigint };
  /** Unix seconds. */
  now: number;
  /** validBefore must lie at least this far ahead, so the transfer can still be included. */
  marginSeconds: number;
};

type VerifiedPayment = {
  payer: string;
  payTo: string;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: string;
};

/**
 * How the payer signed: `eoa` (the signature recovers `from`: the token's (v, r, s) entry point)
 * or `contract` (`from` is a contract that accepts it through ERC-1271: the `bytes signature` one).
 */
export type SignerKind = 'eoa' | 'contract';

export type VerifyResult =
  { ok: true; payment: VerifiedPayment; signer: SignerKind } | { ok: false; cause: VerifyCause };

const fail = (cause: VerifyCause): VerifyResult => ({ ok: false, cause });

/** EIP-55: a mixed-case address whose checksum is wrong is no address (null, not a throw). */
function checksummed(address: string): string | null {
  try {
    return getAddress(address);
  } catch {
    return null;
  }
}

type Terms = { ok: true; payment: VerifiedPayment } | { ok: false; cause: VerifyCause };

/**
 * The terms that do not depend on time: protocol fields, asset, recipient, amount. Null when
 * they hold. The facilitator asks it before a request may join a settlement, so requirements
 * that do not match the authorization never open (or poison) one.
 */
export function termsMismatch(
  payment: ExactPayment,
  expect: Omit<VerifyExpectation, 'now' | 'marginSeconds'>,
): VerifyCause | null {
  if (payment.x402Version !== X402_VERSION) return 'unsupported_version';
  if (payment.scheme !== EXACT) return 'unsupported_scheme';
  if (payment.network !== expect.network) return 'network_mismatch';
  const asset = checksummed(expect.asset);
  if (!asset || asset !== getAddress(expect.domain.verifyingContract)) return 'asset_mismatch';
  const a = payment.payload.authorization;
  const to = checksummed(a.to);
  const payTo = checksummed(expect.payTo);
  if (!to || !payTo || to !== payTo) return 'recipient_mismatch';
  const value = BigInt(a.value);
  if ('exact' in expect.amount ? value !== expect.amount.exact : value === 0n || value > expect.amount.atMost)
    return 'amount_mismatch';
  return null;
}

/** Everything but the signature: protocol fields, asset, recipient, amount, window, nonce. */
function checkTerms(payment: ExactPayment, expect: VerifyExpectation): Terms {
  const mismatch = termsMismatch(payment, expect);
  if (mismatch) return fail(mismatch);
  const a = payment.payload.authorization;
  const to = getAddress(a.to);
  const value = BigInt(a.value);
  const validAfter = BigInt(a.validAfter);
  const validBefore = BigInt(a.validBefore);
  const now = BigInt(expect.now);
  // A few seconds of tolerance for a payer whose clock runs ahead of ours.
  if (validAfter > now + 5n) return fail('not_yet_valid');
  if (validBefore <= now + BigInt(expect.marginSeconds)) return fail('expired');
  if (/^0x0{64}$/.test(a.nonce)) return fail('invalid_nonce');
  const from = checksummed(a.from);
  if (!from) return fail('invalid_signature');
  return {
    ok: true,
    payment: { payer: from, payTo: to, value, validAfter, validBefore, nonce: a.nonce.toLowerCase() },
  };
}

/** Whether the ECDSA signature recovers the payer the terms named (an EOA's signature). */
function recoversPayer(payment: ExactPayment, expect: VerifyExpectation, payer: string): boolean {
  return recoverAuthorizer(expect.domain, payment.payload.authorization, payment.payload.signature) === payer;
}

/** Off-chain only: the terms, and an ECDSA signature that recovers `from` (EOA payers). */
export function verifyExactPayment(payment: ExactPayment, expect: VerifyExpectation): VerifyResult {
  const terms = checkTerms(payment, expect);
  if (!terms.ok) return terms;
  if (!recoversPayer(payment, expect, terms.payment.payer)) return fail('invalid_signature');
  return { ok: true, payment: terms.payment, signer: 'eoa' };
}

/**
 * The terms (checked once), then the signature of an EOA (recovery, no I/O) or of a contract
 * wallet: when the signature does not recover `from`, `from` must accept it through ERC-1271
 * (`contracts`, an eth_call). Throws when that call cannot be made (the caller decides: fail
 * closed or retry).
 */
export async function verifyPayment(
  payment: ExactPayment,
  expect: VerifyExpectation,
  contracts: ContractSignatureCheck,
): Promise<VerifyResult> {
  const terms = checkTerms(payment, expect);
  if (!terms.ok) return terms;
  if (recoversPayer(payment, expect, terms.payment.payer)) return { ok: true, payment: terms.payment, signer: 'eoa' };
  const accepted = await contractAccepts(
    expect.domain,
    payment.payload.authorization,
    payment.payload.signature,
    contracts,
  );
  return accepted ? { ok: true, payment: terms.payment, signer: 'contract' } : fail('invalid_signature');
}

async function contractAccepts(
  domain: TokenDomain,
  a: TransferAuthorization,
  signature: string,
  contracts: ContractSignatureCheck,
): Promise<boolean> {
  const from = checksummed(a.from);
  if (!from) return false;
  let digest: string;
  try {
    digest = authorizationDigest(domain, a);
  } catch {
    return false; // not encodable (e.g. a bad checksum in `to`): nothing was validly signed
  }
  return contracts(from, digest, signature);
}

/**
 * Whether `from` signed this authorization, as the facilitator's handler asks before it opens a
 * settlement: ECDSA recovery, else ERC-1271. Returns how; null when it did not sign. Throws
 * when the contract check cannot reach the node.
 */
export async function authorizationSigner(
  domain: TokenDomain,
  a: TransferAuthorization,
  signature: string,
  contracts: ContractSignatureCheck,
): Promise<SignerKind | null> {
  if (signerKindOf(domain, a, signature) === 'eoa') return 'eoa';
  return (await contractAccepts(domain, a, signature, contracts)) ? 'contract' : null;
}

/**
 * The entry point a verified authorization is submitted through: `eoa` when the signature
 * recovers `from`, else `contract` (only meaningful after `verifyPayment` accepted it).
 */
export function signerKindOf(domain: TokenDomain, a: TransferAuthorization, signature: string): SignerKind {
  const recovered = recoverAuthorizer(domain, a, signature);
  return recovered && recovered.toLowerCase() === a.from.toLowerCase() ? 'eoa' : 'contract';
}
