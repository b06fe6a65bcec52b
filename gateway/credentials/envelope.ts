// Envelope encryption of managed secrets (node:crypto, AES-256-GCM throughout).
//
// Each secret version gets a fresh random 256-bit data key. The secret is encrypted under the
// data key; the data key is encrypted ("wrapped") under the current key-encryption key (KEK)
// from the keyring. The database stores the KEK's id, the wrapped data key and the
// ciphertext; it never stores a KEK or a plaintext data key. Rotating the KEK re-wraps the
// data key only (rewrap), so the secret's ciphertext and version stay as they are.
//
// Both blobs are `0x01 | iv (12) | tag (16) | ciphertext`. The additional authenticated data
// binds each blob to its row (tenant, credential id, secret version, KEK id), so a ciphertext
// copied into another row, tenant or version fails to decrypt instead of leaking.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Keyring } from './config.ts';

const FORMAT = 0x01;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** What identifies a secret version; part of the authenticated data of both blobs. */
export type SecretAddress = { tenantId: string; credentialId: string; version: number };

export type Sealed = { kekId: string; wrappedKey: Buffer; ciphertext: Buffer };

/** Raised for a missing KEK or a blob that fails authentication; carries no key material. */
class EnvelopeError extends Error {
  override name = 'EnvelopeError';
}

function encrypt(key: Buffer, plaintext: Buffer, aad: string): Buffer {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([Buffer.from([FORMAT]), iv, cipher.getAuthTag(), body]);
}

function decrypt(key: Buffer, blob: Buffer, aad: string): Buffer {
  if (blob.length < 1 + IV_BYTES + TAG_BYTES || blob[0] !== FORMAT) throw new EnvelopeError('unrecognised envelope');
  const iv = blob.subarray(1, 1 + IV_BYTES);
  const tag = blob.subarray(1 + IV_BYTES, 1 + IV_BYTES + TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(Buffer.from(aad, 'utf8'));
  decipher.setAuthTag(tag);
  try {
    return Buffer.concat([decipher.update(blob.subarray(1 + IV_BYTES + TAG_BYTES)), decipher.final()]);
  } catch {
    throw new EnvelopeError('envelope failed authentication');
  }
}

const secretAad = (a: SecretAddress) => `credential-secret|${a.tenantId}|${a.credentialId}|${a.version}`;
const keyAad = (kekId: string, a: SecretAddress) => `credential-data-key|${kekId}|${a.tenantId}|${a.credentialId}`;

function kek(keyring: Keyring, id: string | undefined): Buffer {
  const key = id === undefined ? undefined : keyring.keys.get(id);
  if (!key)
    throw new EnvelopeError(
      id === undefined ? 'no key-encryption key is configured' : `key-encryption key ${id} is not in the keyring`,
    );
  return key;
}

/** Encrypts a new secret version under a fresh data key wrapped by the current KEK. */
export function seal(keyring: Keyring, address: SecretAddress, plaintext: string): Sealed {
  const kekId = keyring.current;
  const wrapping = kek(keyring, kekId);
  const dataKey = randomBytes(32);
  try {
    return {
      kekId: kekId!,
      wrappedKey: encrypt(wrapping, dataKey, keyAad(kekId!, address)),
      ciphertext: encrypt(dataKey, Buffer.from(plaintext, 'utf8'), secretAad(address)),
    };
  } finally {
    dataKey.fill(0);
  }
}

export function unseal(keyring: Keyring, address: SecretAddress, sealed: Sealed): string {
  const dataKey = decrypt(kek(keyring, sealed.kekId), sealed.wrappedKey, keyAad(sealed.kekId, address));
  try {
    return decrypt(dataKey, sealed.ciphertext, secretAad(address)).toString('utf8');
  } finally {
    dataKey.fill(0);
  }
}

/** Re-wraps the data key under the current KEK; the ciphertext is untouched. */
export function rewrap(keyring: Keyring, address: SecretAddress, sealed: Sealed): Pick<Sealed, 'kekId' | 'wrappedKey'> {
  const dataKey = decrypt(kek(keyring, sealed.kekId), sealed.wrappedKey, keyAad(sealed.kekId, address));
  try {
    // Prove the data key still opens the secret before the old wrapping is given up.
    decrypt(dataKey, sealed.ciphertext, secretAad(address)).fill(0);
    const kekId = keyring.current;
    return { kekId: kekId!, wrappedKey: encrypt(kek(keyring, kekId), dataKey, keyAad(kekId!, address)) };
  } finally {
    dataKey.fill(0);
  }
}
