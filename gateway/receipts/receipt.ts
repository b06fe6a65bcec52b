// A trust receipt: a compact JWS (EdDSA over Ed25519) whose payload commits to what the
// gateway saw of one completed invocation: who (tenant, agent), what (SHA-256 of request and
// response bodies, never the bodies), how it went (status, upstream status, latency, time)
// and, when the call was paid, the payment (network, payer, amount, transaction hash).
import { CompactSign, compactVerify, importJWK, decodeProtectedHeader, type JWK } from 'jose';
import type { SigningKey } from './keys.ts';

const RECEIPT_TYP = 'gateway-receipt+jws';
const RECEIPT_VERSION = 1;

type ReceiptPayment = {
  network: string;
  asset: string | null;
  payer: string;
  amount: string;
  transaction: string | null;
  /** A call charged after its answer: its scheme (`upto`, `batch-settlement`); absent for `exact`. */
  scheme?: string;
  /** A `batch-settlement` call: the payment channel it was paid from. */
  channel?: string;
};

export type ReceiptFields = {
  ver: number;
  invocation_id: string;
  tenant_id: string;
  agent_id: string;
  status: 'succeeded' | 'failed';
  request_sha256: string | null;
  response_sha256: string | null;
  upstream_status: number | null;
  latency_ms: number | null;
  completed_at: string;
  payment: ReceiptPayment | null;
  /** Issued at, unix seconds. */
  iat: number;
};

export async function signReceipt(fields: ReceiptFields, key: SigningKey): Promise<string> {
  return new CompactSign(new TextEncoder().encode(JSON.stringify(fields)))
    .setProtectedHeader({ alg: 'EdDSA', kid: key.kid, typ: RECEIPT_TYP })
    .sign(key.privateKey);
}

export type VerifiedReceipt = { kid: string; fields: ReceiptFields };

/** Verifies a compact receipt against a JWKS (`{keys: [...]}`): the kid must be there and the signature hold. */
export async function verifyReceipt(jws: string, jwks: { keys: JWK[] }): Promise<VerifiedReceipt> {
  const header = decodeProtectedHeader(jws);
  if (header.alg !== 'EdDSA' && header.alg !== 'Ed25519') throw new Error(`unexpected algorithm ${String(header.alg)}`);
  if (header.typ !== RECEIPT_TYP) throw new Error(`unexpected typ ${String(header.typ)}`);
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  if (!jwk) throw new Error(`no published key with kid ${String(header.kid)}`);
  const key = await importJWK({ ...jwk, alg: 'EdDSA' }, 'EdDSA');
  const { payload } = await compactVerify(jws, key, { algorithms: ['EdDSA', 'Ed25519'] });
  const fields = JSON.parse(new TextDecoder().decode(payload)) as ReceiptFields;
  if (fields.ver !== RECEIPT_VERSION) throw new Error(`unsupported receipt version ${String(fields.ver)}`);
  return { kid: String(header.kid), fields };
}
