// The PEM files of the development PKI and of an operator's CA: their names, and writing them
// safely (private keys 0600, never a truncated file).
import { constants as fsConstants } from 'node:fs';
import { access, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface DevPkiFiles {
  ca: string;
  /** The CA private key, needed only to issue more certificates (issueClientCert). */
  caKey: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

export const FILE_NAMES: DevPkiFiles = {
  ca: 'ca-cert.pem',
  caKey: 'ca-key.pem',
  serverCert: 'server-cert.pem',
  serverKey: 'server-key.pem',
  clientCert: 'client-cert.pem',
  clientKey: 'client-key.pem',
};

/** Write to a temp file and rename, so a crash never leaves a truncated PEM behind. */
export async function writePem(path: string, pem: string, isPrivateKey: boolean): Promise<void> {
  const tmpPath = `${path}.${process.pid}.tmp`;
  await writeFile(tmpPath, pem, { mode: isPrivateKey ? 0o600 : 0o644 });
  await rename(tmpPath, path);
}

export function pathsIn(dir: string): DevPkiFiles {
  return Object.fromEntries(
    Object.entries(FILE_NAMES).map(([k, name]) => [k, join(dir, name)]),
  ) as unknown as DevPkiFiles;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await access(path, fsConstants.F_OK);
    return true;
  } catch {
    return false;
  }
}
