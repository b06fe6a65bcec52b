// Issuing certificates for the facilitator's mutual TLS: a self-signed CA, server
// (serverAuth + subject alternative names) and client (clientAuth) leaves. Everything is ECDSA
// P-256 / SHA-256, generated with @peculiar/x509 over Node's own WebCrypto; leaves are always
// ECDSA P-256, signed with whatever key the CA has (ECDSA P-256 / P-384, or RSA).
import { X509Certificate as NodeX509Certificate, createPrivateKey, webcrypto } from 'node:crypto';
import { isIP } from 'node:net';
import type { Extension } from '@peculiar/x509';
import { x509 } from './x509.ts';

export interface CertAndKeyPem {
  certPem: string;
  /** PKCS#8 PEM ("BEGIN PRIVATE KEY"). */
  keyPem: string;
}

const CA_VALIDITY_YEARS = 5;
const LEAF_VALIDITY_YEARS = 3;
// Backdating notBefore tolerates small clock differences between the machine
// that generated the PKI and the one verifying it (containers, VMs).
const CLOCK_SKEW_MS = 5 * 60 * 1000;

const KEY_ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING_ALGORITHM = { name: 'ECDSA', hash: 'SHA-256' } as const;

// Pass Node's WebCrypto explicitly instead of relying on @peculiar/x509's
// global-provider detection, so behaviour does not depend on globalThis.
const crypto: webcrypto.Crypto = webcrypto;

export async function createCa(commonName = 'x402 facilitator dev CA'): Promise<CertAndKeyPem> {
  const keys = await generateKeyPair();
  const notBefore = new Date(Date.now() - CLOCK_SKEW_MS);
  // serialNumber is omitted on purpose: @peculiar/x509 then draws 16 random
  // bytes and encodes them as a positive INTEGER.
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      name: [{ CN: [commonName] }],
      keys,
      notBefore,
      notAfter: addYears(notBefore, CA_VALIDITY_YEARS),
      signingAlgorithm: SIGNING_ALGORITHM,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, crypto),
      ],
    },
    crypto,
  );
  return { certPem: cert.toString('pem'), keyPem: await exportPrivateKeyPem(keys.privateKey) };
}

/** Issues a client certificate (clientAuth) signed by `ca`, e.g. for another facilitator account. */
export async function issueClientCert(ca: CertAndKeyPem, commonName: string): Promise<CertAndKeyPem> {
  return issueLeaf(ca, commonName, [new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth])]);
}

export async function issueServerCert(
  ca: CertAndKeyPem,
  hosts: string[],
  commonName = hosts[0],
): Promise<CertAndKeyPem> {
  const altNames = hosts.map((host) => ({ type: isIP(host) ? ('ip' as const) : ('dns' as const), value: host }));
  return issueLeaf(ca, commonName, [
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
    new x509.SubjectAlternativeNameExtension(altNames),
  ]);
}

/** Signs a fresh end-entity key with `ca`; `purposeExtensions` add EKU / SAN. */
async function issueLeaf(
  ca: CertAndKeyPem,
  commonName: string,
  purposeExtensions: Extension[],
): Promise<CertAndKeyPem> {
  const caCert = new x509.X509Certificate(ca.certPem);
  const { caKey, signingAlgorithm } = await importCaKey(ca.keyPem);
  const keys = await generateKeyPair();
  const notBefore = new Date(Date.now() - CLOCK_SKEW_MS);
  // A leaf outliving its CA would fail verification anyway; cap it so the
  // certificate's own dates tell the truth.
  const notAfter = new Date(Math.min(addYears(notBefore, LEAF_VALIDITY_YEARS).getTime(), caCert.notAfter.getTime()));

  const cert = await x509.X509CertificateGenerator.create(
    {
      // JSON form, not a DN string, so an operator-chosen name needs no escaping.
      subject: [{ CN: [commonName] }],
      // Use the CA's encoded subject as-is: chain building compares names byte-wise.
      issuer: caCert.subjectName,
      publicKey: keys.publicKey,
      signingKey: caKey,
      notBefore,
      notAfter,
      signingAlgorithm,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        ...purposeExtensions,
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, crypto),
        await x509.AuthorityKeyIdentifierExtension.create(caCert, false, crypto),
      ],
    },
    crypto,
  );
  return { certPem: cert.toString('pem'), keyPem: await exportPrivateKeyPem(keys.privateKey) };
}

/**
 * The CA's signing key for WebCrypto, whatever PEM form it comes in (PKCS#8, SEC1 "EC PRIVATE
 * KEY", PKCS#1 "RSA PRIVATE KEY"): ECDSA P-256 or P-384, or RSA (PKCS#1 v1.5 with SHA-256).
 */
async function importCaKey(
  keyPem: string,
): Promise<{ caKey: webcrypto.CryptoKey; signingAlgorithm: webcrypto.EcdsaParams | webcrypto.RsaHashedImportParams }> {
  const key = createPrivateKey(keyPem);
  const der = key.export({ type: 'pkcs8', format: 'der' });
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType === 'ec' && (curve === 'prime256v1' || curve === 'secp384r1')) {
    const [namedCurve, hash] = curve === 'prime256v1' ? ['P-256', 'SHA-256'] : ['P-384', 'SHA-384'];
    const caKey = await crypto.subtle.importKey('pkcs8', der, { name: 'ECDSA', namedCurve }, false, ['sign']);
    return { caKey, signingAlgorithm: { name: 'ECDSA', hash } };
  }
  if (key.asymmetricKeyType === 'rsa') {
    const algorithm = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' };
    return {
      caKey: await crypto.subtle.importKey('pkcs8', der, algorithm, false, ['sign']),
      signingAlgorithm: algorithm,
    };
  }
  throw new Error(
    `the CA key is ${key.asymmetricKeyType}${curve ? ` ${curve}` : ''}; certificates are issued with an ECDSA P-256 or P-384 or an RSA CA key`,
  );
}

async function generateKeyPair(): Promise<webcrypto.CryptoKeyPair> {
  // Extractable so the private key can be written out as PKCS#8.
  return crypto.subtle.generateKey(KEY_ALGORITHM, true, ['sign', 'verify']);
}

async function exportPrivateKeyPem(key: webcrypto.CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await crypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

export function coversHosts(certPem: string, hosts: string[]): boolean {
  const cert = new NodeX509Certificate(certPem);
  return hosts.every(
    (host) => (isIP(host) ? cert.checkIP(host) : cert.checkHost(host, { subject: 'never' })) !== undefined,
  );
}

function addYears(from: Date, years: number): Date {
  const d = new Date(from);
  d.setUTCFullYear(d.getUTCFullYear() + years);
  return d;
}
