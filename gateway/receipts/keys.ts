// Receipt signing keys (Ed25519, JWK files in RECEIPT_KEYS_DIR). One file per key id; the
// active key signs, every key is published, so rotation is: add a key (it becomes the
// newest, hence active), keep the old file until no receipt signed with it matters.
// Files are written 0600 through a temporary name and a rename, so a reader never sees half
// a key and two processes generating at once merely leave two valid keys.
import { generateKeyPairSync, createPrivateKey, createPublicKey, randomBytes, type KeyObject } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JWK } from 'jose';
import { ConfigError } from '../../lib/config.ts';
import type { ReceiptConfig } from './config.ts';

export type SigningKey = { kid: string; privateKey: KeyObject; publicJwk: JWK };
export type KeyRing = { active: SigningKey; keys: SigningKey[] };

const SUFFIX = '.jwk.json';

/** Key ids sort by creation: `rk-20261122T101500Z-3f9a1c`. */
function newKid(now = new Date()): string {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return `rk-${stamp}-${randomBytes(3).toString('hex')}`;
}

function publicJwkOf(kid: string, privateKey: KeyObject): JWK {
  const { kty, crv, x } = createPublicKey(privateKey).export({ format: 'jwk' });
  return { kty, crv, x, kid, alg: 'EdDSA', use: 'sig' };
}

/** Generates a key into the folder and returns its id. */
export function generateKey(dir: string, now = new Date()): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const kid = newKid(now);
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'EdDSA' };
  const tmp = join(dir, `.${kid}.${process.pid}.tmp`);
  writeFileSync(tmp, JSON.stringify(jwk) + '\n', { mode: 0o600, flag: 'wx' });
  renameSync(tmp, join(dir, kid + SUFFIX));
  return kid;
}

export function readKeys(dir: string): SigningKey[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith(SUFFIX) && !f.startsWith('.'));
  } catch {
    return [];
  }
  return files.sort().map((file) => {
    const jwk = JSON.parse(readFileSync(join(dir, file), 'utf8')) as JWK & { d?: string };
    const kid = file.slice(0, -SUFFIX.length);
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || !jwk.d)
      throw new Error(`receipt key ${kid} is not an Ed25519 private JWK`);
    const privateKey = createPrivateKey({ key: jwk as import('node:crypto').JsonWebKey, format: 'jwk' });
    return { kid, privateKey, publicJwk: publicJwkOf(kid, privateKey) };
  });
}

/**
 * At the start of a process that signs receipts (the API, a gateway worker): a deployment's key
 * folder (RECEIPT_KEYS_DIR) must already hold the keys, readable, with RECEIPT_ACTIVE_KID among
 * them; a problem is one line naming the setting, not a failure on the first receipt.
 */
export function requireReceiptKeys(config: ReceiptConfig): void {
  if (!config.provisioned) return;
  let keys: SigningKey[];
  try {
    keys = readKeys(config.keysDir);
  } catch (err) {
    throw new ConfigError(`RECEIPT_KEYS_DIR: ${(err as Error).message} (in ${config.keysDir})`);
  }
  if (keys.length === 0)
    throw new ConfigError(
      `RECEIPT_KEYS_DIR: ${config.keysDir} holds no receipt signing key; make the first once with npm run receipt-keys -- init, and give every API and gateway worker the same keys`,
    );
  if (config.activeKid && !keys.some((k) => k.kid === config.activeKid))
    throw new ConfigError(`RECEIPT_ACTIVE_KID: ${config.activeKid} is not a key in ${config.keysDir}`);
}

/** The folder's modification time (a key added or removed changes it); -1 when absent. */
function dirStamp(dir: string): number {
  try {
    return statSync(dir).mtimeMs;
  } catch {
    return -1;
  }
}

/**
 * The key ring of the folder, re-read whenever the folder changes (a rotation takes effect
 * without a restart). `create`: generate a first key into an empty folder (the signer does;
 * the publisher only reads).
 */
export function keyRingLoader(config: ReceiptConfig, opts: { create: boolean }) {
  let cached: { stamp: number; ring: KeyRing | null } | null = null;
  return function load(): KeyRing | null {
    let stamp = dirStamp(config.keysDir);
    if (cached && cached.stamp === stamp && stamp !== -1) return cached.ring;
    let keys = readKeys(config.keysDir);
    if (keys.length === 0 && opts.create) {
      generateKey(config.keysDir);
      keys = readKeys(config.keysDir);
      stamp = dirStamp(config.keysDir);
    }
    let ring: KeyRing | null = null;
    if (keys.length > 0) {
      const active = config.activeKid ? keys.find((k) => k.kid === config.activeKid) : keys[keys.length - 1];
      if (!active) throw new Error(`RECEIPT_ACTIVE_KID ${config.activeKid} is not in ${config.keysDir}`);
      ring = { active, keys };
    }
    cached = { stamp, ring };
    return ring;
  };
}
