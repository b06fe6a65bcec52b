// Certificates as files for `npm run facilitator -- certs`: a new CA, or a certificate issued
// from the dev CA of `npm start` or from an operator's own CA.
import { X509Certificate as NodeX509Certificate, createPrivateKey, createPublicKey } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createCa, issueClientCert, issueServerCert, type CertAndKeyPem } from './certificates.ts';
import { exists, FILE_NAMES, pathsIn, writePem } from './pem-files.ts';

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
