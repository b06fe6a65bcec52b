// Development PKI for the facilitator's mutual-TLS `/settle` listener.
//
// One CA signs both the facilitator's server certificate and the gateway's
// client certificate(s). Everything is ECDSA P-256 / SHA-256, generated with
// @peculiar/x509 over Node's own WebCrypto and kept as PEM files so that the
// gateway and facilitator agree on the same CA across restarts.
//
// The dev PKI is a development convenience, not a production PKI: the CA key
// sits next to the certificates so operators (and tests) can issue more client
// certificates for additional facilitator accounts. The same issuing code serves
// an operator's own CA (`npm run facilitator -- certs ca | certs issue --ca-cert
// --ca-key`): leaves are always ECDSA P-256, signed with whatever key the CA has
// (ECDSA P-256 / P-384, or RSA).

import { X509Certificate as NodeX509Certificate, createPrivateKey, createPublicKey, webcrypto } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import type { Extension } from '@peculiar/x509';

// @peculiar/x509 registers its algorithm providers through tsyringe, which
// refuses to load unless a Reflect metadata API exists (normally the
// `reflect-metadata` package, which this project does not depend on). Install
// a minimal one first, then load the library; hence the dynamic import.
installReflectMetadataShim();
const x509 = await import('@peculiar/x509');

export interface CertAndKeyPem {
  certPem: string;
  /** PKCS#8 PEM ("BEGIN PRIVATE KEY"). */
  keyPem: string;
}

interface DevPkiFiles {
  ca: string;
  /** The CA private key, needed only to issue more certificates (issueClientCert). */
  caKey: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

export interface DevPki {
  caCertPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  clientCertPem: string;
  clientKeyPem: string;
  /** Paths (under the `dir` given to ensureDevPki) of the PEM files backing this PKI. */
  files: DevPkiFiles;
}

export interface DevPkiOptions {
  /** Extra DNS names or IP addresses the server certificate must cover, besides localhost / 127.0.0.1 / ::1. */
  serverHosts?: string[];
}

/** Common name of the client certificate the gateway presents by default. */
const DEV_CLIENT_COMMON_NAME = 'dev-gateway';

const DEFAULT_SERVER_HOSTS = ['localhost', '127.0.0.1', '::1'];
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

const FILE_NAMES: DevPkiFiles = {
  ca: 'ca-cert.pem',
  caKey: 'ca-key.pem',
  serverCert: 'server-cert.pem',
  serverKey: 'server-key.pem',
  clientCert: 'client-cert.pem',
  clientKey: 'client-key.pem',
};

/**
 * Returns the development PKI stored in `dir`, generating it on first use.
 *
 * Later calls read the files back, so certificates survive restarts. If the
 * stored server certificate does not cover a requested `serverHosts` entry,
 * only the server certificate is reissued from the stored CA; the CA and
 * client certificates (which other parties may already trust) are kept.
 */
export async function ensureDevPki(dir: string, opts: DevPkiOptions = {}): Promise<DevPki> {
  const files = pathsIn(dir);
  const serverHosts = unique([...DEFAULT_SERVER_HOSTS, ...(opts.serverHosts ?? [])]);

  const present = await Promise.all(Object.values(files).map(exists));
  if (present.every((p) => !p)) {
    return generateDevPki(dir, files, serverHosts);
  }
  if (!present.every((p) => p)) {
    // Regenerating silently would replace the CA and orphan every client
    // certificate issued from it, so a half-populated directory is an error.
    const missing = Object.values(files).filter((_, i) => !present[i]);
    throw new Error(
      `dev PKI in ${dir} is incomplete (missing ${missing.join(', ')}); delete the PKI files to regenerate`,
    );
  }

  const [caCertPem, caKeyPem, serverCertPem, serverKeyPem, clientCertPem, clientKeyPem] = await Promise.all(
    [files.ca, files.caKey, files.serverCert, files.serverKey, files.clientCert, files.clientKey].map((f) =>
      readFile(f, 'utf8'),
    ),
  );

  if (coversHosts(serverCertPem, serverHosts)) {
    return { caCertPem, serverCertPem, serverKeyPem, clientCertPem, clientKeyPem, files };
  }
  const server = await issueServerCert({ certPem: caCertPem, keyPem: caKeyPem }, serverHosts);
  await writePem(files.serverKey, server.keyPem, true);
  await writePem(files.serverCert, server.certPem, false);
  return { caCertPem, serverCertPem: server.certPem, serverKeyPem: server.keyPem, clientCertPem, clientKeyPem, files };
}

/** Issues a client certificate (clientAuth) signed by `ca`, e.g. for another facilitator account. */
export async function issueClientCert(ca: CertAndKeyPem, commonName: string): Promise<CertAndKeyPem> {
  return issueLeaf(ca, commonName, [new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth])]);
}

async function generateDevPki(dir: string, files: DevPkiFiles, serverHosts: string[]): Promise<DevPki> {
  const ca = await createCa();
  const server = await issueServerCert(ca, serverHosts);
  const client = await issueClientCert(ca, DEV_CLIENT_COMMON_NAME);

  // 0700: the directory holds private keys.
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // The CA certificate is written last so that an interrupted run leaves a
  // visibly incomplete set instead of a CA without its issued certificates.
  await writePem(files.caKey, ca.keyPem, true);
  await writePem(files.serverKey, server.keyPem, true);
  await writePem(files.serverCert, server.certPem, false);
  await writePem(files.clientKey, client.keyPem, true);
  await writePem(files.clientCert, client.certPem, false);
  await writePem(files.ca, ca.certPem, false);

  return {
    caCertPem: ca.certPem,
    serverCertPem: server.certPem,
    serverKeyPem: server.keyPem,
    clientCertPem: client.certPem,
    clientKeyPem: client.keyPem,
    files,
  };
}

async function createCa(commonName = 'x402 facilitator dev CA'): Promise<CertAndKeyPem> {
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

/** The CA files a certificate is issued from: npm start's dev CA (devCaFiles) or an operator's own. */
export type CaFiles = { certFile: string; keyFile: string };

/** The dev CA of `npm start` in `pkiDir`; refuses when npm start never made one. */
export async function devCaFiles(pkiDir: string): Promise<CaFiles> {
  const files = pathsIn(pkiDir);
  if (!(await exists(files.ca)) || !(await exists(files.caKey)))
    throw new Error(`no dev CA in ${pkiDir} (${FILE_NAMES.ca}, ${FILE_NAMES.caKey}): run npm start first`);
  return { certFile: files.ca, keyFile: files.caKey };
}

/**
 * `npm run facilitator -- certs ca`: a new CA (ECDSA P-256, self-signed, 5 years) for the
 * facilitator's mutual TLS, written to `outDir` as ca-cert.pem and ca-key.pem (0600).
 * Refuses to overwrite: certificates may already have been issued from it.
 */
export async function createCaFiles(outDir: string, commonName: string): Promise<CaFiles> {
  const ca = { certFile: join(outDir, FILE_NAMES.ca), keyFile: join(outDir, FILE_NAMES.caKey) };
  await refuseExisting([ca.certFile, ca.keyFile], 'choose another --out or remove it');
  const created = await createCa(commonName);
  await mkdir(outDir, { recursive: true, mode: 0o700 });
  await writePem(ca.keyFile, created.keyPem, true);
  await writePem(ca.certFile, created.certPem, false);
  return ca;
}

/**
 * `npm run facilitator -- certs issue`: a certificate and key (ECDSA P-256) for `commonName`
 * from the CA in `caFiles`, written to `outDir` as `<name>-cert.pem` and `<name>-key.pem`
 * (0600): a client certificate (clientAuth) for a facilitator account, or, given `serverHosts`,
 * the facilitator's server certificate (serverAuth, the hosts as subject alternative names).
 * Refuses to overwrite: a certificate may already be some account's.
 */
export async function issueCertFiles(
  caFiles: CaFiles,
  commonName: string,
  outDir: string,
  serverHosts: string[] = [],
): Promise<{ certFile: string; keyFile: string; certPem: string }> {
  const certFile = join(outDir, `${commonName}-cert.pem`);
  const keyFile = join(outDir, `${commonName}-key.pem`);
  await refuseExisting([certFile, keyFile], 'choose another --name or remove it');
  const ca = await readCa(caFiles);
  const issued = serverHosts.length
    ? await issueServerCert(ca, serverHosts, commonName)
    : await issueClientCert(ca, commonName);
  await mkdir(outDir, { recursive: true });
  await writePem(keyFile, issued.keyPem, true);
  await writePem(certFile, issued.certPem, false);
  return { certFile, keyFile, certPem: issued.certPem };
}

async function refuseExisting(files: string[], advice: string): Promise<void> {
  for (const file of files) if (await exists(file)) throw new Error(`${file} exists already: ${advice}`);
}

/** An operator's CA: a CA certificate and the unencrypted private key that matches it. */
async function readCa(caFiles: CaFiles): Promise<CertAndKeyPem> {
  const read = (file: string) =>
    readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new Error(`cannot read ${file} (${err.code ?? 'unreadable'})`);
    });
  const [certPem, keyPem] = await Promise.all([read(caFiles.certFile), read(caFiles.keyFile)]);
  let cert: NodeX509Certificate;
  try {
    cert = new NodeX509Certificate(certPem);
  } catch {
    throw new Error(`${caFiles.certFile} is not a PEM certificate`);
  }
  if (!cert.ca) throw new Error(`${caFiles.certFile} is not a CA certificate (basicConstraints CA:FALSE or absent)`);
  let publicOfKey: string;
  try {
    publicOfKey = createPublicKey(createPrivateKey(keyPem)).export({ type: 'spki', format: 'pem' }).toString();
  } catch {
    throw new Error(`${caFiles.keyFile} is not an unencrypted PEM private key`);
  }
  if (publicOfKey !== cert.publicKey.export({ type: 'spki', format: 'pem' }).toString())
    throw new Error(`${caFiles.keyFile} is not the key of ${caFiles.certFile}`);
  return { certPem, keyPem };
}

async function issueServerCert(ca: CertAndKeyPem, hosts: string[], commonName = hosts[0]): Promise<CertAndKeyPem> {
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

function coversHosts(certPem: string, hosts: string[]): boolean {
  const cert = new NodeX509Certificate(certPem);
  return hosts.every(
    (host) => (isIP(host) ? cert.checkIP(host) : cert.checkHost(host, { subject: 'never' })) !== undefined,
  );
}

/** Write to a temp file and rename, so a crash never leaves a truncated PEM behind. */
async function writePem(path: string, pem: string, isPrivateKey: boolean): Promise<void> {
  const tmpPath = `${path}.${process.pid}.tmp`;
  await writeFile(tmpPath, pem, { mode: isPrivateKey ? 0o600 : 0o644 });
  await rename(tmpPath, path);
}

function pathsIn(dir: string): DevPkiFiles {
  return Object.fromEntries(
    Object.entries(FILE_NAMES).map(([k, name]) => [k, join(dir, name)]),
  ) as unknown as DevPkiFiles;
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path, fsConstants.F_OK);
    return true;
  } catch {
    return false;
  }
}

function addYears(from: Date, years: number): Date {
  const d = new Date(from);
  d.setUTCFullYear(d.getUTCFullYear() + years);
  return d;
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

/**
 * Just enough of the reflect-metadata API for tsyringe (getMetadata,
 * getOwnMetadata, defineMetadata). @peculiar/x509's injectable classes carry
 * no design-time metadata, so lookups simply come back empty. Left alone if a
 * real polyfill is already installed.
 */
function installReflectMetadataShim(): void {
  type MetadataTarget = object;
  type MetadataReflect = typeof Reflect & {
    getMetadata?: unknown;
    getOwnMetadata?: unknown;
    defineMetadata?: unknown;
  };
  const reflect = Reflect as MetadataReflect;
  if (typeof reflect.getMetadata === 'function') return;

  const store = new WeakMap<MetadataTarget, Map<string | symbol | undefined, Map<unknown, unknown>>>();
  const ownMap = (target: MetadataTarget, property: string | symbol | undefined, create: boolean) => {
    let byProperty = store.get(target);
    if (!byProperty) {
      if (!create) return undefined;
      byProperty = new Map();
      store.set(target, byProperty);
    }
    let byKey = byProperty.get(property);
    if (!byKey && create) {
      byKey = new Map();
      byProperty.set(property, byKey);
    }
    return byKey;
  };
  const getOwnMetadata = (key: unknown, target: MetadataTarget, property?: string | symbol) =>
    ownMap(target, property, false)?.get(key);
  const getMetadata = (key: unknown, target: MetadataTarget, property?: string | symbol): unknown => {
    // Like reflect-metadata: inherited metadata is found along the prototype chain.
    for (let t: MetadataTarget | null = target; t; t = Object.getPrototypeOf(t)) {
      const byKey = ownMap(t, property, false);
      if (byKey?.has(key)) return byKey.get(key);
    }
    return undefined;
  };
  const defineMetadata = (key: unknown, value: unknown, target: MetadataTarget, property?: string | symbol) => {
    ownMap(target, property, true)!.set(key, value);
  };
  Object.assign(reflect, { getMetadata, getOwnMetadata, defineMetadata });
}

export { certFingerprint256 } from '../../facilitator/fingerprint.ts';
