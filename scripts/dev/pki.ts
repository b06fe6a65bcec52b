// Development PKI for the facilitator's mutual-TLS `/settle` listener.
//
// One CA signs both the facilitator's server certificate and the gateway's
// client certificate(s). Everything is ECDSA P-256 / SHA-256, generated with
// @peculiar/x509 over Node's own WebCrypto and kept as PEM files so that the
// gateway and facilitator agree on the same CA across restarts.
//
// The dev PKI is a development convenience, not a production PKI: the CA key
// sits next to the certificates so operators (and tests) can issue more client
// certificates for additional facilitator accounts. Issuing lives in
// certificates.ts; the files of `npm run facilitator -- certs` in ca-files.ts.

import { mkdir, readFile } from 'node:fs/promises';
import { coversHosts, createCa, issueClientCert, issueServerCert } from './certificates.ts';
import { exists, pathsIn, writePem, type DevPkiFiles } from './pem-files.ts';

export { createCaFiles, devCaFiles, issueCertFiles } from './ca-files.ts';
export { issueClientCert, type CertAndKeyPem } from './certificates.ts';
export { certFingerprint256 } from '../../facilitator/fingerprint.ts';

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

function unique(values: string[]): string[] {
  return [...new Set(values)];
}
