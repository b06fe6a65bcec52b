// Signs receipts with the folder's active key, in both processes that issue them: the worker's
// receipt activity (activities/receipts.ts, transactional calls) and the API for the streaming
// path, which has no workflow: there the JWS is made before the completion is written and
// stored in the same statement (gateway/invocations/stream-records.ts), so a completed row and its receipt never
// diverge. Both create the first key in an empty development folder; a deployment's folder
// (RECEIPT_KEYS_DIR) is provisioned before they start (requireReceiptKeys).
import { keyRingLoader } from './keys.ts';
import { signReceipt, type ReceiptFields } from './receipt.ts';
import { receiptFieldsOf, type ReceiptFacts } from './store.ts';
import type { ReceiptConfig } from './config.ts';

export type SignedReceipt = { kid: string; jws: string };

/** The key folder holds no usable key (yet): worth retrying, not a receipt to leave unsigned. */
export class NoSigningKeyError extends Error {
  constructor() {
    super('no receipt signing key');
    this.name = 'NoSigningKeyError';
  }
}

/** Signs a receipt's fields, issued now, with the active key (the folder is re-read when it changes). */
export function createClaimsSigner(
  config: ReceiptConfig,
): (fields: Omit<ReceiptFields, 'iat'>) => Promise<SignedReceipt> {
  const keys = keyRingLoader(config, { create: !config.provisioned });
  return async (fields) => {
    const ring = keys();
    if (!ring) throw new NoSigningKeyError();
    const jws = await signReceipt({ ...fields, iat: Math.floor(Date.now() / 1000) }, ring.active);
    return { kid: ring.active.kid, jws };
  };
}

/** Signs the receipt of a terminal row from its columns (the streaming path). */
export function createReceiptSigner(config: ReceiptConfig): (facts: ReceiptFacts) => Promise<SignedReceipt> {
  const sign = createClaimsSigner(config);
  return (facts) => sign(receiptFieldsOf(facts));
}
