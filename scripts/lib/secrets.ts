// Development secrets generated on first start and kept in the data folder (mode 0600), so a
// second `npm start` reuses them and tokens stay valid. Values from the environment win.
// Every command that reads the data folder finds it the way `npm start` does (dataDir), and
// says which one it read (announceDataDir).
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export type DevSecrets = { jwtSecret: string; baoRootToken: string; vaultKek: string };

/** The data folder of `npm start`: DATA_DIR (default .data), from the project folder npm runs in. */
export function dataDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.DATA_DIR || '.data');
}

/** One line on stderr naming the data folder a command reads (stdout stays its answer). */
export function announceDataDir(command: string, dir: string = dataDir()): void {
  process.stderr.write(`${command}: data folder ${dir} (DATA_DIR; the one npm start uses with the same setting)\n`);
}

export function secretsFile(dir: string): string {
  return join(dir, 'secrets.json');
}

/** The secrets `npm start` generated, or undefined when it never ran with this data folder. */
export function readDevSecrets(dir: string): Partial<DevSecrets> | undefined {
  const file = secretsFile(dir);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Partial<DevSecrets>) : undefined;
}

/** The dev secrets, generated (and written) on first use; only `npm start` and its test stacks create them. */
export function loadDevSecrets(dir: string): DevSecrets {
  mkdirSync(dir, { recursive: true });
  const stored = readDevSecrets(dir) ?? {};
  const secrets: DevSecrets = {
    jwtSecret: stored.jwtSecret ?? randomBytes(32).toString('base64url'),
    baoRootToken: stored.baoRootToken ?? `dev-${randomBytes(16).toString('hex')}`,
    vaultKek: stored.vaultKek ?? randomBytes(32).toString('base64'),
  };
  writeFileSync(secretsFile(dir), JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}
