// Off-chain verification of an x402 `exact` payment: protocol fields, recipient, amount,
// validity window, nonce shape and the EIP-712 signature. The gateway runs it before it
// forwards anything; the facilitator runs it again (then adds the on-chain checks) because it
// trusts no client. Returns the precise cause for operators; callers only ever see a coarse one.
import { getAddress } from 'ethers';
import { recoverAuthorizer, type TokenDomain } from './eip3009.ts';
import { SCHEME_EXACT, X402_VERSION, type Payment } from './schemas.ts';

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

export type VerifiedPayment = { payer: string; payTo: string; value: bigint; validAfter: bigint; validBefore: bigint; nonce: string };

export type VerifyResult = { ok: true; payment: VerifiedPayment } | { ok: false; cause: VerifyCause };

const fail = (cause: VerifyCause): VerifyResult => ({ ok: false, cause });

/** EIP-55: a mixed-case address whose checksum is wrong is no address (null, not a throw). */
function checksummed(address: string): string | null {
  try {
    return getAddress(address);
  } catch {
    return null;
  }
}

export function verifyExactPayment(payment: Payment, expect: VerifyExpectation): VerifyResult {
  if (payment.x402Version !== X402_VERSION) return fail('unsupported_version');
  if (payment.scheme !== SCHEME_EXACT) return fail('unsupported_scheme');
  if (payment.network !== expect.network) return fail('network_mismatch');
  const asset = checksummed(expect.asset);
  if (!asset || asset !== getAddress(expect.domain.verifyingContract)) return fail('asset_mismatch');

  const a = payment.payload.authorization;
  const to = checksummed(a.to);
  const payTo = checksummed(expect.payTo);
  if (!to || !payTo || to !== payTo) return fail('recipient_mismatch');
  const value = BigInt(a.value);
  if ('exact' in expect.amount ? value !== expect.amount.exact : value === 0n || value > expect.amount.atMost) {
    return fail('amount_mismatch');
  }
  const validAfter = BigInt(a.validAfter);
  const validBefore = BigInt(a.validBefore);
  const now = BigInt(expect.now);
  // A few seconds of tolerance for a payer whose clock runs ahead of ours.
  if (validAfter > now + 5n) return fail('not_yet_valid');
  if (validBefore <= now + BigInt(expect.marginSeconds)) return fail('expired');
  if (/^0x0{64}$/.test(a.nonce)) return fail('invalid_nonce');

  const signer = recoverAuthorizer(expect.domain, a, payment.payload.signature);
  const from = checksummed(a.from);
  if (!signer || !from || signer !== from) return fail('invalid_signature');

  return {
    ok: true,
    payment: { payer: from, payTo: to, value, validAfter, validBefore, nonce: a.nonce.toLowerCase() },
  };
}
