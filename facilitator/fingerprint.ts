// A client certificate's identity at the facilitator: the SHA-256 fingerprint of its DER
// encoding, lowercase hex without separators (what accounts are keyed by).
import { X509Certificate as NodeX509Certificate } from 'node:crypto';

/**
 * Lowercase hex SHA-256 of the certificate's DER: the same value as
 * `tlsSocket.getPeerCertificate().fingerprint256` without colons, lowercased.
 */
export function certFingerprint256(certPem: string): string {
  return new NodeX509Certificate(certPem).fingerprint256.replaceAll(':', '').toLowerCase();
}
