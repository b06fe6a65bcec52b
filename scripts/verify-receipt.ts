// `npm run verify-receipt -- FILE [--jwks FILE_OR_URL]`: checks one trust receipt offline.
// FILE holds the compact JWS, or the JSON answer of GET /v1/invocations/{id}/receipt. The
// public keys come from --jwks (a saved /.well-known/jwks.json, or its URL), else from the
// local key folder (RECEIPT_KEYS_DIR, default DATA_DIR/receipt-keys). Prints the verified
// fields and exits 0; prints why and exits 1 when the receipt does not verify.
import { readFileSync } from 'node:fs';
import type { JWK } from 'jose';
import { verifyReceipt } from '../gateway/receipts/receipt.ts';
import { readKeys } from '../gateway/receipts/keys.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';
import { parseCommand, usageExit, UsageError } from './lib/cli.ts';
import { announceDataDir } from './lib/secrets.ts';

const USAGE = `usage: npm run verify-receipt -- FILE [--jwks FILE_OR_URL]
  Checks a trust receipt offline: FILE holds the compact JWS or the JSON answer of
  GET /v1/invocations/{id}/receipt; keys from --jwks, else RECEIPT_KEYS_DIR (default DATA_DIR/receipt-keys).`;
const { values, positionals } = parseCommand({
  usage: USAGE,
  options: { jwks: { type: 'string' } },
  allowPositionals: true,
});
if (positionals.length !== 1)
  usageExit(USAGE, positionals.length ? 'name one receipt file' : 'the receipt FILE is missing');

function readText(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    throw new UsageError(`${what} ${file}: cannot be read`);
  }
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
    if (!process.env.RECEIPT_KEYS_DIR) announceDataDir('verify-receipt');
    const keys = readKeys(config.keysDir).map((k) => k.publicJwk);
    if (keys.length === 0) throw new Error(`no keys in ${config.keysDir}; pass --jwks`);
    return { keys };
  }
  if (/^https?:\/\//.test(values.jwks)) {
    const res = await fetch(values.jwks);
    if (!res.ok) throw new Error(`${values.jwks} answered ${res.status}`);
    return (await res.json()) as { keys: JWK[] };
  }
  return JSON.parse(readText(values.jwks, '--jwks')) as { keys: JWK[] };
}

try {
  const jws = receiptOf(readText(positionals[0], 'receipt file'));
  const { kid, fields } = await verifyReceipt(jws, await jwks());
  process.stdout.write(`receipt verified (key ${kid})\n${JSON.stringify(fields, null, 2)}\n`);
} catch (err) {
  if (err instanceof UsageError) {
    process.stderr.write(`verify-receipt: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`receipt NOT verified: ${(err as Error).message.split('\n')[0]}\n`);
  process.exit(1);
}
