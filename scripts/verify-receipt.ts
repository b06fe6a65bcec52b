// `npm run verify-receipt -- FILE [--jwks FILE_OR_URL]`: checks one trust receipt offline.
// FILE holds the compact JWS, or the JSON answer of GET /v1/invocations/{id}/receipt. The
// public keys come from --jwks (a saved /.well-known/jwks.json, or its URL), else from the
// local key folder (RECEIPT_KEYS_DIR, default DATA_DIR/receipt-keys). Prints the verified
// claims and exits 0; prints why and exits 1 when the receipt does not verify.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { JWK } from 'jose';
import { verifyReceipt } from '../api/receipts/receipt.ts';
import { readKeys } from '../api/receipts/keys.ts';
import { loadReceiptConfig } from '../api/receipts/config.ts';

const { values, positionals } = parseArgs({ options: { jwks: { type: 'string' } }, allowPositionals: true });
if (positionals.length !== 1) {
  process.stderr.write('usage: npm run verify-receipt -- FILE [--jwks FILE_OR_URL]\n');
  process.exit(2);
}

/** The compact JWS inside FILE, whichever of the two shapes it has. */
function receiptOf(text: string): string {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) {
    const parsed = JSON.parse(trimmed) as { receipt?: unknown };
    if (typeof parsed.receipt !== 'string') throw new Error('the JSON file has no "receipt" string');
    return parsed.receipt;
  }
  return trimmed;
}

async function jwks(): Promise<{ keys: JWK[] }> {
  if (!values.jwks) {
    const config = loadReceiptConfig(process.env);
    const keys = readKeys(config.keysDir).map((k) => k.publicJwk);
    if (keys.length === 0) throw new Error(`no keys in ${config.keysDir}; pass --jwks`);
    return { keys };
  }
  if (/^https?:\/\//.test(values.jwks)) {
    const res = await fetch(values.jwks);
    if (!res.ok) throw new Error(`${values.jwks} answered ${res.status}`);
    return (await res.json()) as { keys: JWK[] };
  }
  return JSON.parse(readFileSync(values.jwks, 'utf8')) as { keys: JWK[] };
}

try {
  const jws = receiptOf(readFileSync(positionals[0], 'utf8'));
  const { kid, claims } = await verifyReceipt(jws, await jwks());
  process.stdout.write(`receipt verified (key ${kid})\n${JSON.stringify(claims, null, 2)}\n`);
} catch (err) {
  process.stderr.write(`receipt NOT verified: ${(err as Error).message}\n`);
  process.exit(1);
}
