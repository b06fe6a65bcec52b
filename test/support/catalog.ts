// Helpers for the catalog, vault and settlement tests: PEM bundles, the OpenBao KV v2 engine,
// extra gateway instances (one whose database is gone, one whose logs are captured) and
// assertions on the uniform error body.
import assert from 'node:assert/strict';
import { createPrivateKey, generateKeyPairSync, webcrypto } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { request } from 'undici';
import { stack } from './stack.ts';
import type { Reply } from './http.ts';
import { startGateway } from '../../api/wiring.ts';
import { flushAccessRecords } from '../../lib/observability/access.ts';
import { openOrm } from '../../gateway/db/orm.ts';
import type { GatewayConfig } from '../../gateway/config.ts';
import '../../scripts/dev/x509.ts'; // installs the Reflect shim @peculiar/x509 needs

/** A 4xx answer with the uniform `{error}` body and nothing else. */
export function assertError(res: Reply, status: number, message?: RegExp): void {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.text}`);
  assert.deepEqual(Object.keys(res.json ?? {}), ['error'], `error body: ${res.text}`);
  assert.equal(typeof res.json.error, 'string');
  if (message) assert.match(res.json.error, message);
}

/** 401 and 500 carry no body. */
export function assertEmpty(res: Reply, status: number): void {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.text}`);
  assert.equal(res.text, '');
}

/** The dev PKI's client certificate and key as one PEM text: the facilitator credential format. */
export function clientTlsBundle(): string {
  const { clientCertPem, clientKeyPem } = stack().infra.pki;
  return `${clientKeyPem.trim()}\n${clientCertPem.trim()}\n`;
}

/** The dev client certificate with some other key. */
export function mismatchedBundle(): string {
  const other = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .privateKey.export({ type: 'pkcs8', format: 'pem' })
    .toString();
  return `${stack().infra.pki.clientCertPem.trim()}\n${other}`;
}

/** A self-signed certificate that expired in 2021, with its key. */
export async function expiredBundle(): Promise<string> {
  const x509 = await import('@peculiar/x509');
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: '01',
      name: 'CN=expired',
      notBefore: new Date('2020-01-01'),
      notAfter: new Date('2021-01-01'),
      keys,
      signingAlgorithm: alg,
    },
    webcrypto,
  );
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  const keyPem = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' })
    .export({ type: 'pkcs8', format: 'pem' })
    .toString();
  return `${cert.toString('pem')}\n${keyPem}`;
}

/** Writes a secret into the stack's OpenBao as an operator would (its root token), at
 *  `secret/data/<path>`: the dev server's KV v2 mount. */
export async function vaultWrite(path: string, data: Record<string, unknown>): Promise<void> {
  const { addr, adminToken } = stack().infra.vault;
  const res = await request(`${addr}/v1/secret/data/${path}`, {
    method: 'POST',
    headers: { 'x-vault-token': adminToken, 'content-type': 'application/json' },
    body: JSON.stringify({ data }),
  });
  await res.body.dump();
  if (res.statusCode >= 300) throw new Error(`vault write ${path}: ${res.statusCode}`);
}

/** The tenant's own reference to a secret under its prefix (the default layout). */
export function tenantVaultRef(tenant: string, path: string, field: string): string {
  return `secret/data/tenants/${tenant}/${path}#${field}`;
}

export type ExtraGateway = { url: string; lines: string[]; close(): Promise<void> };

async function listen(server: Server, lines: string[], cleanup: () => Promise<unknown>): Promise<ExtraGateway> {
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lines,
    close: async () => {
      // As the API's own stop does: access lines still queued (ACCESS_LOG=batched) are written.
      flushAccessRecords();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await cleanup();
    },
  };
}

/** A logger at trace level with no redaction, writing into `lines`: what reaches it is what the code logged. */
function capturingLogger(lines: string[]) {
  return pino({ name: 'api', level: 'trace' }, { write: (chunk: string) => void lines.push(chunk) });
}

/**
 * A second API instance on the stack's database and Temporal whose every log line is kept;
 * `overrides` replace parts of the stack's configuration (PUBLIC_URL, TRUST_PROXY, ...).
 */
export async function startCapturedGateway(overrides: Partial<GatewayConfig> = {}): Promise<ExtraGateway> {
  const lines: string[] = [];
  const server = await startGateway(
    { ...stack().config, ...overrides, port: 0 },
    stack().orm,
    stack().temporal,
    capturingLogger(lines),
  );
  return listen(server, lines, async () => undefined);
}

/**
 * An API instance whose database refuses connections (nothing listens on port 1): a real
 * failure underneath every handler, for the v1 contract's 500 rows (no body, nothing internal logged).
 */
export async function startBrokenGateway(): Promise<ExtraGateway> {
  const lines: string[] = [];
  const orm = await openOrm('postgres://postgres@127.0.0.1:1/gone', { poolMax: 1 });
  const server = await startGateway({ ...stack().config, port: 0 }, orm, stack().temporal, capturingLogger(lines));
  return listen(server, lines, () => orm.close());
}
