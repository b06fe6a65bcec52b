// The format of a facilitator credential's secret: one PEM text holding the client
// certificate (leaf first, then any intermediates) and its unencrypted private key
// (PKCS#8 "PRIVATE KEY", or "EC PRIVATE KEY" / "RSA PRIVATE KEY"), in any order. The
// certificate must be currently valid and match the key.
import { X509Certificate, createPrivateKey } from 'node:crypto';

export type ClientTlsBundle = { certPem: string; keyPem: string };

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[\s\S]+?\r?\n-----END CERTIFICATE-----/g;
const KEY_BLOCK = /-----BEGIN ((?:RSA |EC )?PRIVATE KEY)-----\r?\n[\s\S]+?\r?\n-----END \1-----/g;

/** Why a bundle was refused, coarse and safe to show the caller. */
export type BundleProblem =
  'no_certificate' | 'no_private_key' | 'several_private_keys' | 'unreadable' | 'mismatch' | 'expired';

export function parseClientTlsBundle(secret: string, now = new Date()): ClientTlsBundle | BundleProblem {
  const certs: string[] = secret.match(CERT_BLOCK) ?? [];
  const keys = [...secret.matchAll(KEY_BLOCK)].map((m) => m[0]);
  if (certs.length === 0) return 'no_certificate';
  if (keys.length === 0) return 'no_private_key';
  if (keys.length > 1) return 'several_private_keys';
  try {
    const leaf = new X509Certificate(certs[0]!);
    const key = createPrivateKey(keys[0]!);
    for (const extra of certs.slice(1)) new X509Certificate(extra);
    if (!leaf.checkPrivateKey(key)) return 'mismatch';
    if (
      new Date(leaf.validTo).getTime() < now.getTime() ||
      new Date(leaf.validFrom).getTime() > now.getTime() + 5 * 60_000
    )
      return 'expired';
  } catch {
    return 'unreadable';
  }
  return { certPem: `${certs.join('\n')}\n`, keyPem: `${keys[0]}\n` };
}

export function bundleProblemMessage(problem: BundleProblem): string {
  switch (problem) {
    case 'no_certificate':
      return 'the facilitator credential holds no PEM certificate';
    case 'no_private_key':
      return 'the facilitator credential holds no unencrypted PEM private key';
    case 'several_private_keys':
      return 'the facilitator credential holds more than one private key';
    case 'mismatch':
      return "the facilitator credential's private key does not match its certificate";
    case 'expired':
      return "the facilitator credential's certificate is not currently valid";
    case 'unreadable':
      return "the facilitator credential's PEM blocks could not be parsed";
  }
}
