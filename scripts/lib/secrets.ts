// Development secrets generated on first start and kept in the data folder (mode 0600), so a
// second `npm start` reuses them and tokens stay valid. Values from the environment win.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export type DevSecrets = { jwtSecret: string; baoRootToken: string; vaultKek: string };

export function loadDevSecrets(dataDir: string): DevSecrets {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'secrets.json');
  const stored: Partial<DevSecrets> = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const secrets: DevSecrets = {
    jwtSecret: stored.jwtSecret ?? randomBytes(32).toString('base64url'),
    baoRootToken: stored.baoRootToken ?? `dev-${randomBytes(16).toString('hex')}`,
    vaultKek: stored.vaultKek ?? randomBytes(32).toString('base64'),
  };
  writeFileSync(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}
