// Signs receipts in the process that completes the invocation (the streaming path, which has
// no workflow): the JWS is made before the completion is written and stored in the same
// statement (api/proxy/records.ts), so a completed row and its receipt never diverge.
import { keyRingLoader } from './keys.ts';
import { signReceipt } from './receipt.ts';
import { receiptClaimsOf, type ReceiptFacts } from './store.ts';
import type { ReceiptConfig } from './config.ts';

export type SignedReceipt = { kid: string; jws: string };

export function createReceiptSigner(config: ReceiptConfig): (facts: ReceiptFacts) => Promise<SignedReceipt> {
  // Like the worker, it creates the first key in an empty folder.
  const keys = keyRingLoader(config, { create: true });
  return async (facts) => {
    const ring = keys();
    if (!ring) throw new Error('no receipt signing key');
    const jws = await signReceipt({ ...receiptClaimsOf(facts), iat: Math.floor(Date.now() / 1000) }, ring.active);
    return { kid: ring.active.kid, jws };
  };
}
