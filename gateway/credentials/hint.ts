// The masked hint shown for a managed secret: enough to tell two secrets apart, never enough to
// matter. A PEM bundle holding a certificate (a facilitator client certificate and its key) is
// named by the certificate, which is public: its subject and the tail of its SHA-256
// fingerprint, never anything of the key. Any other secret: at most its last four characters,
// fewer for short secrets, none below eight.
import { X509Certificate } from 'node:crypto';

const CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/;

function certificateHint(secret: string): string | null {
  const pem = CERTIFICATE.exec(secret)?.[0];
  if (!pem) return null;
  try {
    const cert = new X509Certificate(pem);
    const subject = cert.subject.replaceAll('\n', ', ').slice(0, 120);
    return `certificate ${subject}, sha256 …${cert.fingerprint256.replaceAll(':', '').slice(-8)}`;
  } catch {
    return null;
  }
}

export function maskedHint(secret: string): string {
  const named = certificateHint(secret);
  if (named) return named;
  const chars = [...secret.trimEnd()];
  const shown = chars.length >= 16 ? 4 : chars.length >= 8 ? 2 : 0;
  return `****${chars.slice(chars.length - shown).join('')}`;
}
