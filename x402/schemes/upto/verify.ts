// Off-chain verification of an x402 `upto` payment: the Permit2 authorization must name the
// asset, the upto proxy as spender, the payee as `witness.to` and the expected facilitator as
// `witness.facilitator`; permit at least the maximum asked; be valid now and long enough to be
// settled after the call; and be signed by `from` (its key, else ERC-1271). An EIP-2612 permit in
// the eip2612GasSponsoring extension must approve Permit2 for exactly the permitted amount, signed
// by the payer. The gateway runs it before the upstream is called; the facilitator again before it
// settles. Returns the precise cause for operators; callers only ever see a coarse one.
import { Signature, getAddress } from 'ethers';
import type { TokenDomain } from '../../token.ts';
import type { ContractSignatureCheck } from '../../erc1271.ts';
import { SCHEME_UPTO, permit2Nonce, sponsoredPermitOf, type UptoAuthorization, type UptoPayment } from './schemas.ts';
import {
  PERMIT2_ADDRESS,
  UPTO_PROXY_ADDRESS,
  eip2612PermitDigest,
  recoverDigestSigner,
  uptoPermitDigest,
  type UptoPermit,
} from './typed-data.ts';

type UptoVerifyCause =
  | 'unsupported_scheme'
  | 'network_mismatch'
  | 'asset_mismatch'
  | 'spender_mismatch'
  | 'recipient_mismatch'
  | 'facilitator_mismatch'
  | 'amount_mismatch'
  | 'not_yet_valid'
  | 'expired'
  | 'invalid_nonce'
  | 'invalid_signature'
  | 'invalid_permit';

export type UptoExpectation = {
  /** CAIP-2, e.g. `eip155:8453`. */
  network: string;
  /** The asset's EIP-712 domain: its chain and address are the authorization's; the permit is signed under it. */
  token: TokenDomain;
  payTo: string;
  /** The facilitator address the challenge named (`extra.facilitatorAddress`): the only one that may settle. */
  facilitator: string;
  /** The maximum the challenge asked; the permitted amount must be at least this. */
  maxAmount: bigint;
  /** Unix seconds. */
  now: number;
  /** The deadline must lie at least this far ahead, so the call can run and the charge still land. */
  marginSeconds: number;
};

/** The payer's EIP-2612 permit, split as the proxy's settleWithPermit takes it. */
type SponsoredPermit = { value: bigint; deadline: bigint; v: number; r: string; s: string };

export type VerifiedUptoPayment = UptoPermit & {
  payer: string;
  signature: string;
  /** Present when the payer sent an EIP-2612 permit: settle through settleWithPermit. */
  permit2612: SponsoredPermit | null;
};

export type UptoVerifyResult =
  { ok: true; payment: VerifiedUptoPayment; signer: 'eoa' | 'contract' } | { ok: false; cause: UptoVerifyCause };

const fail = (cause: UptoVerifyCause): { ok: false; cause: UptoVerifyCause } => ({ ok: false, cause });

/** EIP-55: a mixed-case address whose checksum is wrong is no address (null, not a throw). */
function checksummed(address: string): string | null {
  try {
    return getAddress(address);
  } catch {
    return null;
  }
}

function sameAddress(a: string, b: string): boolean {
  const left = checksummed(a);
  return left !== null && left === checksummed(b);
}

type Terms = { ok: true; permit: UptoPermit; payer: string } | { ok: false; cause: UptoVerifyCause };

/** Everything but the signatures: scheme, network, asset, spender, payee, facilitator, amount, window, nonce. */
function checkTerms(payment: UptoPayment, expect: UptoExpectation): Terms {
  if (payment.accepted.scheme !== SCHEME_UPTO) return fail('unsupported_scheme');
  if (payment.accepted.network !== expect.network) return fail('network_mismatch');
  const a: UptoAuthorization = payment.payload.permit2Authorization;
  if (!sameAddress(a.permitted.token, expect.token.verifyingContract)) return fail('asset_mismatch');
  if (!sameAddress(a.spender, UPTO_PROXY_ADDRESS)) return fail('spender_mismatch');
  if (!sameAddress(a.witness.to, expect.payTo)) return fail('recipient_mismatch');
  if (!sameAddress(a.witness.facilitator, expect.facilitator)) return fail('facilitator_mismatch');
  const amount = BigInt(a.permitted.amount);
  if (amount === 0n || amount < expect.maxAmount) return fail('amount_mismatch');
  const now = BigInt(expect.now);
  const validAfter = BigInt(a.witness.validAfter);
  const deadline = BigInt(a.deadline);
  // A few seconds of tolerance for a payer whose clock runs ahead of ours.
  if (validAfter > now + 5n) return fail('not_yet_valid');
  if (deadline <= now + BigInt(expect.marginSeconds)) return fail('expired');
  const nonce = permit2Nonce(a.nonce);
  if (nonce === null) return fail('invalid_nonce');
  const payer = checksummed(a.from);
  if (!payer) return fail('invalid_signature');
  const permit: UptoPermit = {
    token: getAddress(a.permitted.token),
    amount,
    spender: UPTO_PROXY_ADDRESS,
    nonce,
    deadline,
    to: getAddress(a.witness.to),
    facilitator: getAddress(a.witness.facilitator),
    validAfter,
  };
  return { ok: true, permit, payer };
}

/** Whether `payer` made `signature` over `digest`: its key, else (with `contracts`) ERC-1271. Null: it did not. */
async function signerKind(
  payer: string,
  digest: string,
  signature: string,
  contracts: ContractSignatureCheck | undefined,
): Promise<'eoa' | 'contract' | null> {
  if (recoverDigestSigner(digest, signature) === payer) return 'eoa';
  if (contracts && (await contracts(payer, digest, signature))) return 'contract';
  return null;
}

/**
 * The eip2612GasSponsoring permit, when the payment carries one: it must approve Permit2 (the
 * spender the proxy passes) for exactly the permitted amount (the proxy refuses any other value),
 * come from the payer for this asset, outlive the margin, and be the payer's signature. Its nonce
 * is the token's and can only be checked on chain (the facilitator's simulation does).
 */
async function checkSponsoredPermit(
  payment: UptoPayment,
  terms: { permit: UptoPermit; payer: string },
  expect: UptoExpectation,
  contracts: ContractSignatureCheck | undefined,
): Promise<{ ok: true; permit2612: SponsoredPermit | null } | { ok: false; cause: UptoVerifyCause }> {
  const sponsored = sponsoredPermitOf(payment);
  if (sponsored.kind === 'none') return { ok: true, permit2612: null };
  if (sponsored.kind === 'invalid') return fail('invalid_permit');
  const { info } = sponsored;
  const value = BigInt(info.amount);
  const deadline = BigInt(info.deadline);
  if (
    !sameAddress(info.from, terms.payer) ||
    !sameAddress(info.asset, terms.permit.token) ||
    !sameAddress(info.spender, PERMIT2_ADDRESS) ||
    value !== terms.permit.amount ||
    deadline <= BigInt(expect.now + expect.marginSeconds)
  )
    return fail('invalid_permit');
  const digest = eip2612PermitDigest(expect.token, {
    owner: terms.payer,
    spender: PERMIT2_ADDRESS,
    value,
    nonce: BigInt(info.nonce),
    deadline,
  });
  const split = splitSignature(info.signature);
  if (!split || !(await signerKind(terms.payer, digest, info.signature, contracts))) return fail('invalid_permit');
  return { ok: true, permit2612: { value, deadline, ...split } };
}

/** (v, r, s) of a 65-byte signature, as the token's permit takes it; null when v is no recovery id. */
function splitSignature(signature: string): { v: number; r: string; s: string } | null {
  try {
    const { v, r, s } = Signature.from(signature);
    return { v, r, s };
  } catch {
    return null;
  }
}

/**
 * Verifies an `upto` payment against what the challenge asked. Without `contracts` only a
 * payer's key signature is accepted (no I/O); with it, a contract payer is asked through ERC-1271
 * (an eth_call; throws when that call cannot be made: the caller decides to fail closed or retry).
 */
export async function verifyUptoPayment(
  payment: UptoPayment,
  expect: UptoExpectation,
  contracts?: ContractSignatureCheck,
): Promise<UptoVerifyResult> {
  const terms = checkTerms(payment, expect);
  if (!terms.ok) return terms;
  const signature = payment.payload.signature;
  const kind = await signerKind(
    terms.payer,
    uptoPermitDigest(expect.token.chainId, terms.permit),
    signature,
    contracts,
  );
  if (!kind) return fail('invalid_signature');
  const sponsored = await checkSponsoredPermit(payment, terms, expect, contracts);
  if (!sponsored.ok) return sponsored;
  return {
    ok: true,
    payment: { ...terms.permit, payer: terms.payer, signature, permit2612: sponsored.permit2612 },
    signer: kind,
  };
}
