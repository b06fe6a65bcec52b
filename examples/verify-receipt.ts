// Checks an invocation's trust receipt offline (docs/RECEIPTS.md): the receipt (a compact JWS,
// EdDSA over Ed25519) and the gateway's public keys (/.well-known/jwks.json) are fetched once;
// then, with plain jose and no further call to the gateway, the signature is checked against
// the published key its `kid` names and the fields are printed. When BODY is set, the SHA-256
// of that request body is compared with the receipt's `request_sha256`: the receipt commits to
// what was sent, never holding the body itself. The agent must have `"emit_receipts": true`.
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   INVOCATION_ID  a completed invocation, or the first argument
//   BODY           optional: the request body the call sent
// Run against `npm start`:
//   BODY=hello npm run example:verify-receipt -- inv_…
import { createHash } from 'node:crypto';
import { compactVerify, createLocalJWKSet, decodeProtectedHeader, type JSONWebKeySet } from 'jose';
import { api, fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:verify-receipt -- INVOCATION_ID
  Fetches the invocation's trust receipt and the gateway's JWKS once, verifies the receipt
  offline and, with BODY, the request body against its request_sha256. Settings: GATEWAY_URL,
  TOKEN, BODY (examples/verify-receipt.ts).`);
const s = gatewaySettings();
const invocationId =
  process.argv[2] ??
  process.env.INVOCATION_ID ??
  fail('name the invocation: INVOCATION_ID=inv_… or its id as the first argument', 2);

// 1. Online, once: the receipt (404 until the gateway has signed it, just after the call
// completes; waited for a few seconds) and the public keys (no token needed).
let receipt: { receipt: string } | undefined;
for (let waited = 0; !receipt; waited += 250) {
  const res = await fetch(`${s.gateway}/v1/invocations/${invocationId}/receipt`, {
    headers: { authorization: `Bearer ${s.token}` },
  });
  if (res.status === 200) receipt = (await res.json()) as { receipt: string };
  else if (res.status !== 404 || waited >= 10_000)
    fail(`GET /v1/invocations/${invocationId}/receipt answered ${res.status}: ${await res.text()}`);
  else await new Promise((r) => setTimeout(r, 250));
}
const jwks = await api<JSONWebKeySet>(s, 'GET', '/.well-known/jwks.json', 200);

// 2. Offline: nothing below talks to the gateway.
type Fields = { ver: number; invocation_id: string; request_sha256: string | null; status: string };
try {
  const header = decodeProtectedHeader(receipt.receipt);
  if (header.typ !== 'gateway-receipt+jws') throw new Error(`not a gateway receipt (typ ${String(header.typ)})`);
  const { payload } = await compactVerify(receipt.receipt, createLocalJWKSet(jwks), {
    algorithms: ['EdDSA', 'Ed25519'],
  });
  const fields = JSON.parse(new TextDecoder().decode(payload)) as Fields;
  if (fields.ver !== 1) throw new Error(`unknown receipt version ${fields.ver}`);
  if (fields.invocation_id !== invocationId) throw new Error(`the receipt is for ${fields.invocation_id}`);
  console.log(`receipt verified (key ${String(header.kid)}): invocation ${invocationId} ${fields.status}`);
  console.log(JSON.stringify(fields, null, 2));
  const body = process.env.BODY;
  if (body !== undefined) {
    const digest = createHash('sha256').update(body).digest('hex');
    if (digest !== fields.request_sha256)
      throw new Error(`BODY is not what the call sent: SHA-256 ${digest}, the receipt says ${fields.request_sha256}`);
    console.log(`request body matches the receipt (SHA-256 ${digest})`);
  }
} catch (err) {
  fail(`receipt NOT verified: ${(err as Error).message.split('\n')[0]}`);
}
