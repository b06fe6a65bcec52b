// Signs receipts with the folder's active key: the one signing step of both modes, from the
// terminal row's facts. The worker's receipt activity (activities/receipts.ts) signs a
// transactional call's; the API signs a streaming call's, which has no workflow: there the JWS
// is made before the completion is written and stored in the same statement
// (gateway/invocations/stream-records.ts), so a completed row and its receipt never diverge. Both create the first key in an empty development folder; a deployment's folder
// (RECEIPT_KEYS_DIR) is provisioned before they start (requireReceiptKeys).
import { keyRingLoader } from './keys.ts';
import { signReceipt } from './receipt.ts';
import { receiptsIssued } from '../metrics.ts';
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

/**
 * Signs the receipt of a terminal row from its facts, issued now, with the active key (the
 * folder is re-read when it changes). NoSigningKeyError while the folder holds no usable key.
 */
export function createReceiptSigner(config: ReceiptConfig): (facts: ReceiptFacts) => Promise<SignedReceipt> {
  const keys = keyRingLoader(config, { create: !config.provisioned });
  return async (facts) => {
    const ring = keys();
    if (!ring) throw new NoSigningKeyError();
    const jws = await signReceipt({ ...receiptFieldsOf(facts), iat: Math.floor(Date.now() / 1000) }, ring.active);
    return { kid: ring.active.kid, jws };
  };
}

/** A signed receipt stored with its row: counted once, by key (both modes). */
export function countIssued(receipt: SignedReceipt): void {
  receiptsIssued.inc({ kid: receipt.kid });
}
