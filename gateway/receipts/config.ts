// Receipt signing keys: a folder of Ed25519 private JWKs, one file per key id. The worker
// signs with the active key; the API publishes every key in the folder at
// /.well-known/jwks.json, so receipts signed before a rotation keep verifying.
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { parseEnv } from '../../lib/config.ts';

const ReceiptEnv = z.object({
  DATA_DIR: z.string().default('.data'),
  RECEIPT_KEYS_DIR: z.string().optional(),
  RECEIPT_ACTIVE_KID: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/)
    .optional(),
});

export type ReceiptConfig = {
  /** Folder of `<kid>.jwk.json` private keys. */
  keysDir: string;
  /**
   * RECEIPT_KEYS_DIR was set: a deployment's folder, whose keys are made before its processes
   * start (npm run receipt-keys -- init) and never by a process, since an API and a worker
   * each making their own first key would sign with keys the other does not publish. Unset,
   * the development folder under DATA_DIR gets its first key from whoever signs first.
   */
  provisioned: boolean;
  /** The signing key; default the newest key id (ids start with their creation time). */
  activeKid?: string;
};

export function loadReceiptConfig(env: NodeJS.ProcessEnv): ReceiptConfig {
  const e = parseEnv(ReceiptEnv, env);
  return {
    keysDir: resolve(e.RECEIPT_KEYS_DIR ?? join(e.DATA_DIR, 'receipt-keys')),
    provisioned: e.RECEIPT_KEYS_DIR !== undefined,
    activeKid: e.RECEIPT_ACTIVE_KID,
  };
}
